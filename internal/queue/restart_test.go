package queue_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/freeport"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// TestJobPublishedDuringANATSRestart: jobs published one after another while the NATS server
// stops and starts again (same port, same store) each either succeed, and are in the JOBS stream
// after the restart, or fail with ErrUnavailable (the API's 503) within PublishTimeout; none
// waits longer. Once the server is back, publishing works again without a new connection.
func TestJobPublishedDuringANATSRestart(t *testing.T) {
	t.Parallel()
	_, portStr, _ := net.SplitHostPort(freeport.Addr(t))
	port, _ := strconv.Atoi(portStr)
	dir := t.TempDir()
	start := func() interface{ Shutdown() } {
		s, err := queue.StartEmbedded(queue.EmbeddedOptions{StoreDir: dir, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	url := "nats://127.0.0.1:" + portStr
	nc, err := queue.Connect(url, "restart-test", queue.Auth{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	defer d.Close()

	type outcome struct {
		id   uuid.UUID
		err  error
		took time.Duration
	}
	var (
		mu  sync.Mutex
		out []outcome
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := uuid.New()
			t0 := time.Now()
			err := d.PublishJob(ctx, id)
			mu.Lock()
			out = append(out, outcome{id, err, time.Since(t0)})
			mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	s.Shutdown()
	time.Sleep(500 * time.Millisecond)
	s = start()
	defer s.Shutdown()
	wait.For(t, 15*time.Second, "the dispatcher to reconnect", d.Up)
	wait.For(t, 15*time.Second, "a job to be queued after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(out) > 0 && out[len(out)-1].err == nil
	})
	close(stop)
	wg.Wait()

	stream, err := js.Stream(ctx, queue.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	failed, ok := 0, 0
	for _, o := range out {
		if o.took > d.PublishTimeout+250*time.Millisecond {
			t.Errorf("a publish took %v (%v), longer than PublishTimeout %v", o.took, o.err, d.PublishTimeout)
		}
		if o.err != nil {
			failed++
			if !errors.Is(o.err, queue.ErrUnavailable) {
				t.Errorf("a publish failed with %v, want ErrUnavailable", o.err)
			}
			continue
		}
		ok++
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < uint64(ok) {
		t.Errorf("JOBS holds %d messages after the restart; %d publishes succeeded", info.State.Msgs, ok)
	}
	if failed == 0 {
		t.Error("no publish met the restart")
	}
	t.Logf("%d queued, %d refused with ErrUnavailable", ok, failed)
}
