package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// reconnecting is a JOBS consumer connected through a proxy the test cuts, with a handler that
// reports each message it gets, and a connection of the test's own for publishing.
type reconnecting struct {
	proxy *tcpproxy.Proxy
	nc    *nats.Conn
	djs   jetstream.JetStream // not through the proxy
	c     *queue.Consumer
	got   chan delivery

	mu    sync.Mutex
	async []error // the consumer's connection's slow-consumer errors: messages it dropped
}

type delivery struct {
	data string
	num  uint64 // JetStream's delivery count
}

// pullSize is the consumer's pull buffer.
const pullSize = 8

// startReconnecting runs the consumer; handle, when not nil, runs before a message is reported.
// AckWait is a minute: a message lost on the way comes back long after the test's deadlines.
func startReconnecting(t *testing.T, handle func()) *reconnecting {
	t.Helper()
	s := natstest.Server(t)
	r := &reconnecting{got: make(chan delivery, 1000)}
	_, r.djs = natstest.ConnectTo(t, s.ClientURL())
	var js jetstream.JetStream
	r.proxy, r.nc, js = natstest.Proxied(t, s.ClientURL(), "reconnecting-consumer")
	r.nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrSlowConsumer) {
			return // the cut's own write errors ("connection reset by peer") say nothing of the consumer
		}
		r.mu.Lock()
		r.async = append(r.async, err)
		r.mu.Unlock()
	})
	r.c = queue.NewConsumer(js, queue.JobsConsumer(pullSize, time.Minute), queue.Layout{}, pullSize, quiet)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.c.Run(rctx, func(m jetstream.Msg) {
			if handle != nil {
				handle()
			}
			meta, _ := m.Metadata()
			r.got <- delivery{string(m.Data()), meta.NumDelivered}
			_ = m.Ack()
		})
	}()
	t.Cleanup(func() {
		rcancel()
		<-done
	})
	wait.For(t, 5*time.Second, "consumer running", func() bool { return r.c.Check(context.Background()) == nil })
	return r
}

func (r *reconnecting) publish(t *testing.T, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		if _, err := r.djs.Publish(ctx, queue.SubjectJob, fmt.Appendf(nil, "job %d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// reconnect drops the consumer's connection and lets it reconnect.
func (r *reconnecting) reconnect(t *testing.T) {
	t.Helper()
	r.proxy.Cut()
	wait.For(t, 5*time.Second, "the connection to drop", func() bool { return !r.nc.IsConnected() })
	r.proxy.Restore()
	wait.For(t, 10*time.Second, "the reconnect", r.nc.IsConnected)
}

// expect waits up to within for n messages, each handed to the handler once, and no message
// dropped as a slow consumer.
//
// A message may arrive as JetStream's second delivery: the server can hand it to the pull request
// of the connection the test cut before it has noticed that connection is gone, find no one to
// take it, and give it straight to the new pull request (nats-server's didNotDeliver, which counts
// a delivery). That is at once, not after AckWait (a minute here, far past within); a message the
// client received and dropped would come back only then. So the test asks for each message once
// and in time, whatever the server's count.
func (r *reconnecting) expect(t *testing.T, n int, within time.Duration) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.After(within)
	for len(seen) < n {
		select {
		case d := <-r.got:
			if seen[d.data] {
				t.Errorf("%s handed to the handler again (delivery %d)", d.data, d.num)
			} else if d.num != 1 {
				t.Logf("%s came as delivery %d: the server's first went to the cut connection", d.data, d.num)
			}
			seen[d.data] = true
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("%d of %d messages handled within %v of the reconnect (slow-consumer errors: %v)", len(seen), n, within, r.async)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.async {
		t.Errorf("messages dropped: %v", err)
	}
}

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
	release := make(chan struct{})
	var first sync.Once
	r := startReconnecting(t, func() {
		first.Do(func() { <-release }) // the worker is busy: the buffer fills behind it
	})
	const n = 40
	before := r.nc.Stats().InMsgs
	r.publish(t, 0, n)
	// One message in the handler and the rest of a full pull in the iterator's buffer, all of
	// them received: a message still on its way when the connection drops is lost with it, and
	// comes back only after AckWait whatever the consumer does.
	wait.For(t, 5*time.Second, "a full pull received", func() bool {
		info, err := r.djs.Consumer(context.Background(), queue.StreamJobs, r.c.Name())
		return err == nil && info.CachedInfo().NumAckPending == pullSize && r.nc.Stats().InMsgs-before >= pullSize
	})
	r.reconnect(t)
	time.Sleep(300 * time.Millisecond) // nats.go's iterator hears of the reconnect
	close(release)
	r.expect(t, n, 15*time.Second)
}

// An idle consumer takes the work published right after a reconnect at once. Its pull request
// from before the drop may still wait on the server: the consumer must tell the server it is
// done with it (the iterator's drain, sent once the link is back), or the server hands the new
// messages to a subscription the client has already let go, and they come back only after
// AckWait.
func TestIdleConsumerTakesWorkRightAfterAReconnect(t *testing.T) {
	t.Parallel()
	r := startReconnecting(t, nil)
	r.publish(t, 0, 1)
	r.expect(t, 1, 5*time.Second)
	for round := range 2 {
		r.reconnect(t)
		r.publish(t, 1+round*5, 6+round*5)
		r.expect(t, 5, 5*time.Second)
	}
}
