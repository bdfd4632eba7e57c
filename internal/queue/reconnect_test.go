package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// A consumer whose handler is busy (every slot taken, as in a worker under load) when its
// connection drops and comes back loses none of the messages its pull buffer holds, and takes
// each message once, with no wait for AckWait.
//
// Why: nats.go's pull iterator counts what it asked for and has not yet handed over; a reconnect
// resets that count and asks the server for a full buffer again while the old one is still full,
// so the new messages overflow the buffer and are dropped as a slow consumer, to come back only
// after AckWait (seen in a fault campaign: a list paused 22 s). See docs/reliability.md.
func TestBusyConsumerLosesNothingOverAReconnect(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	direct, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	djs, _ := jetstream.New(direct)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, djs, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	proxy, nc, js := natstest.Proxied(t, s.ClientURL(), "busy-consumer")
	var slow []error
	var slowMu sync.Mutex
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		slowMu.Lock()
		slow = append(slow, err)
		slowMu.Unlock()
	})

	const pull, n = 8, 40
	spec := queue.JobsConsumer(pull, time.Minute) // AckWait far beyond the test's deadline
	c := queue.NewConsumer(js, spec, queue.Layout{}, pull, quiet)
	release := make(chan struct{})
	type delivery struct {
		data string
		num  uint64
	}
	got := make(chan delivery, 4*n)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var first sync.Once
	go func() {
		done <- c.Run(rctx, func(m jetstream.Msg) {
			first.Do(func() { <-release }) // the worker is busy: the buffer fills behind it
			meta, _ := m.Metadata()
			got <- delivery{string(m.Data()), meta.NumDelivered}
			_ = m.Ack()
		})
	}()
	t.Cleanup(func() {
		rcancel()
		<-done
	})
	for i := range n {
		if _, err := djs.Publish(ctx, queue.SubjectJob, fmt.Appendf(nil, "job %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// One message in the handler and the rest of a full pull in the iterator's buffer.
	eventually(t, "a full pull delivered", 5*time.Second, func() bool {
		info, err := djs.Consumer(context.Background(), queue.StreamJobs, c.Name())
		return err == nil && info.CachedInfo().NumAckPending == pull
	})

	proxy.Cut()
	eventually(t, "the connection to drop", 5*time.Second, func() bool { return !nc.IsConnected() })
	proxy.Restore()
	eventually(t, "the reconnect", 10*time.Second, nc.IsConnected)
	time.Sleep(300 * time.Millisecond) // nats.go's iterator hears of the reconnect
	close(release)

	seen := map[string]uint64{}
	deadline := time.After(15 * time.Second)
	for len(seen) < n {
		select {
		case d := <-got:
			if _, twice := seen[d.data]; twice || d.num != 1 {
				t.Errorf("%s delivered again (delivery %d)", d.data, d.num)
			}
			seen[d.data] = d.num
		case <-deadline:
			slowMu.Lock()
			defer slowMu.Unlock()
			t.Fatalf("%d of %d messages handled 15 s after the reconnect (async errors: %v)", len(seen), n, slow)
		}
	}
	slowMu.Lock()
	defer slowMu.Unlock()
	for _, err := range slow {
		t.Errorf("asynchronous error: %v", err)
	}
}
