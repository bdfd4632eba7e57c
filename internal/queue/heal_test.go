package queue_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A consumer whose stream (and so the consumer itself) disappears, as when a NATS server comes
// back with an empty store, re-creates both and goes on consuming; /readyz's check says so.
func TestConsumerHealsAfterItsStreamIsLost(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	c := queue.NewConsumer(js, queue.JobsConsumer(4, 5*time.Second), queue.Layout{}, 4, quiet)
	c.Heartbeat = 500 * time.Millisecond
	var handled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(m jetstream.Msg) {
			handled.Add(1)
			_ = m.Ack()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	check := func() bool { return c.Check(context.Background()) == nil }
	wait.For(t, 5*time.Second, "consumer running", check)

	publish := func() {
		t.Helper()
		pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer pcancel()
		if _, err := js.Publish(pctx, queue.SubjectJob, []byte(`{}`)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	publish()
	wait.For(t, 5*time.Second, "first message handled", func() bool { return handled.Load() == 1 })

	if err := js.DeleteStream(context.Background(), queue.StreamJobs); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "readiness to notice the lost consumer", func() bool { return !check() })
	wait.For(t, 15*time.Second, "consumer re-created", check)
	publish()
	wait.For(t, 10*time.Second, "message after the loss handled", func() bool { return handled.Load() == 2 })
	_ = nc
}

// The keeper re-creates a stream that went missing, and its check reports the gap meanwhile.
func TestKeeperRecreatesMissingStreams(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	link := queue.Watch(nc)
	t.Cleanup(link.Close)
	k := queue.NewKeeper(js, link, queue.Layout{}, quiet)
	k.Interval = time.Hour // only kicks and reconnects trigger a check here
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	if err := k.Check(ctx); err != nil {
		t.Fatalf("check with every stream present: %v", err)
	}
	if err := js.DeleteStream(ctx, queue.StreamVerify); err != nil {
		t.Fatal(err)
	}
	if err := k.Check(ctx); err == nil {
		t.Fatal("check passed with the VERIFY stream missing")
	}
	// The failed check kicked the keeper, which re-creates the stream.
	wait.For(t, 5*time.Second, "VERIFY re-created", func() bool { return k.Check(ctx) == nil })
}

// A consumer told to stop while NATS is down stops at once: draining would need the server.
func TestConsumerStopsWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc, err := queue.Connect(s.ClientURL(), "consumer-under-test", queue.Auth{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	c := queue.NewConsumer(js, queue.JobsConsumer(4, 5*time.Second), queue.Layout{}, 4, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, func(m jetstream.Msg) { _ = m.Ack() }) }()
	wait.For(t, 5*time.Second, "consumer running", func() bool { return c.Check(context.Background()) == nil })

	s.Shutdown()
	s.WaitForShutdown()
	wait.For(t, 5*time.Second, "the connection to drop", func() bool { return !nc.IsConnected() })
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("stopped after %v", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its stop with NATS down")
	}
}
