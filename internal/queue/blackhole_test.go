package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verdict"
)

// proxied is an API-side dispatcher and a verify.sync worker, both connected with Connect's
// production options through one proxy in front of a real NATS server, which the test can black
// hole (Hold) or stall (Pause).
type proxied struct {
	proxy    *tcpproxy.Proxy
	direct   jetstream.JetStream // not through the proxy
	api      *nats.Conn
	worker   *nats.Conn
	d        *queue.Dispatcher
	slowSeen chan string // emails starting "slow" reach the worker here and are never answered
}

func startProxied(t *testing.T) *proxied {
	t.Helper()
	s := natstest.Server(t)
	_, djs := natstest.ConnectTo(t, s.ClientURL())
	proxy, err := tcpproxy.Start(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })

	p := &proxied{proxy: proxy, direct: djs, slowSeen: make(chan string, 16)}
	connect := func(name string) *nats.Conn {
		nc, err := queue.Connect("nats://"+proxy.Addr(), name, queue.Auth{}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	p.api, p.worker = connect("api-under-test"), connect("worker-under-test")
	_, err = p.worker.QueueSubscribe(queue.SubjectVerifySync, queue.QueueVerifiers, func(m *nats.Msg) {
		var req queue.VerifyRequest
		_ = json.Unmarshal(m.Data, &req)
		if strings.HasPrefix(req.Email, "slow") {
			p.slowSeen <- req.Email
			return
		}
		body, _ := json.Marshal(queue.VerifyReply{Result: &verdict.Result{Email: req.Email}})
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.worker.Flush(); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(p.api)
	p.d = queue.NewDispatcher(p.api, js, queue.Layout{})
	t.Cleanup(p.d.Close)
	return p
}

// verifyOne runs VerifyOne with a 10 s deadline (the API's) and says how long it took.
func (p *proxied) verifyOne(email string) (verdict.Result, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	r, err := p.d.VerifyOne(ctx, email)
	return r, time.Since(start), err
}

type outcome struct {
	err  error
	took time.Duration
}

// A black-holed connection (open, carrying nothing) is seen down within about 2.5 s, without a
// request of its own: requests waiting on it, and requests sent before it was noticed, end with
// ErrUnavailable (not ErrTimeout at their 10 s deadline); new ones are refused at once. The
// clients' own pings then drop it, on the API's side and the worker's, and once the link carries
// bytes again both reconnect and requests succeed, nothing restarted.
func TestBlackHoledNATSFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	p := startProxied(t)
	if r, _, err := p.verifyOne("a@example.com"); err != nil || r.Email != "a@example.com" {
		t.Fatalf("before the black hole: %+v, %v", r, err)
	}

	waiting := make(chan outcome, 1)
	go func() { _, took, err := p.verifyOne("slow@example.com"); waiting <- outcome{err, took} }()
	select {
	case <-p.slowSeen: // sent and taken: its reply is what the black hole swallows
	case <-time.After(5 * time.Second):
		t.Fatal("the worker never got the request")
	}

	held := time.Now()
	p.proxy.Hold()
	sent := make(chan outcome, 1)
	go func() { _, took, err := p.verifyOne("b@example.com"); sent <- outcome{err, took} }()

	wait.For(t, 4*time.Second, "the link to go down", func() bool { return !p.d.Up() })
	t.Logf("link down %v after the black hole began", time.Since(held).Round(time.Millisecond))
	for what, ch := range map[string]chan outcome{"a request waiting for its reply": waiting, "a request sent into the black hole": sent} {
		select {
		case o := <-ch:
			if !errors.Is(o.err, queue.ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", what, o.err)
			}
			t.Logf("%s: %v after %v", what, o.err, o.took.Round(time.Millisecond))
		case <-time.After(5*time.Second - time.Since(held)):
			t.Fatalf("%s: no answer within 5 s of the black hole", what)
		}
	}
	if _, took, err := p.verifyOne("c@example.com"); !errors.Is(err, queue.ErrUnavailable) || took > 100*time.Millisecond {
		t.Errorf("a request while the link is down: %v after %v, want ErrUnavailable at once", err, took)
	}

	// Connect's pings (every 2 s, 2 outstanding at most) drop the dead connection in every process.
	wait.For(t, 8*time.Second-time.Since(held), "both clients to drop the dead connection", func() bool {
		return !p.api.IsConnected() && !p.worker.IsConnected()
	})
	t.Logf("both clients dropped it %v after the black hole began", time.Since(held).Round(time.Millisecond))

	// Reconnecting to a server that accepts but does not answer, nats.go holds the connection's
	// lock for its connect timeout; the link still answers at once, and so does a request.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, took, err := p.verifyOne("e@example.com"); !errors.Is(err, queue.ErrUnavailable) || took > 100*time.Millisecond {
			t.Fatalf("a request while the client reconnects: %v after %v, want ErrUnavailable at once", err, took)
		}
	}

	p.proxy.Restore()
	restored := time.Now()
	wait.For(t, 5*time.Second, "a request to succeed after the black hole", func() bool {
		r, _, err := p.verifyOne("d@example.com")
		return err == nil && r.Email == "d@example.com"
	})
	t.Logf("requests succeed again %v after the black hole ended", time.Since(restored).Round(time.Millisecond))
}

// A batch whose connection is black-holed ends with ErrUnavailable ListGrace after the link is
// seen down, listing every address, instead of waiting for its deadline and blaming the workers.
func TestBlackHoledNATSEndsABatch(t *testing.T) {
	t.Parallel()
	p := startProxied(t) // no worker takes batch items: the batch would wait for its deadline
	p.d.ListGrace = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan outcome, 1)
	var missing []int
	go func() {
		start := time.Now()
		m, err := p.d.VerifyMany(ctx, []string{"a@example.com", "b@example.com"}, nil)
		missing = m
		done <- outcome{err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond) // published, waiting for answers
	held := time.Now()
	p.proxy.Hold()
	select {
	case o := <-done:
		if !errors.Is(o.err, queue.ErrUnavailable) || len(missing) != 2 {
			t.Errorf("batch: missing %v, %v; want both missing and ErrUnavailable", missing, o.err)
		}
		t.Logf("batch ended %v after the black hole began: %v", time.Since(held).Round(time.Millisecond), o.err)
	case <-time.After(6 * time.Second):
		t.Fatal("the batch did not end within 6 s of the black hole (link down + ListGrace 1 s)")
	}
}

// A stall that ends before the client gives up on the connection (a partition that heals: TCP
// delivers what it held back) takes the link down and up again on the same connection, with no
// reconnect: the link is up again as soon as a probe is answered. Links on one connection share
// one probe; closing one leaves the others working.
func TestStalledNATSLinkComesBackWithoutReconnect(t *testing.T) {
	t.Parallel()
	p := startProxied(t)
	link := queue.Watch(p.api)
	defer link.Close()
	other := queue.Watch(p.api)
	other.Close()
	if !link.Up() {
		t.Fatal("link down on a live connection")
	}
	reconnects := link.Reconnects()
	guarded, release := link.Guard(context.Background())
	defer release()
	changed := link.Changed()

	p.proxy.Pause()
	paused := time.Now()
	wait.For(t, 4*time.Second, "the link to go down", func() bool { return !link.Up() })
	t.Logf("link down %v after the stall began", time.Since(paused).Round(time.Millisecond))
	select {
	case <-changed:
	default:
		t.Error("Changed did not fire when the link went down")
	}
	select {
	case <-guarded.Done():
		if !errors.Is(context.Cause(guarded), queue.ErrLinkLost) {
			t.Errorf("guard cancelled with %v, want ErrLinkLost", context.Cause(guarded))
		}
	default:
		t.Error("the guarded context was not cancelled")
	}

	p.proxy.Resume()
	resumed := time.Now()
	wait.For(t, 2*time.Second, "the link to come back", link.Up)
	t.Logf("link up %v after the stall ended", time.Since(resumed).Round(time.Millisecond))
	if n := link.Reconnects(); n != reconnects {
		t.Errorf("reconnected %d times; the stall should not cost a reconnect", n-reconnects)
	}
	if r, _, err := p.verifyOne("a@example.com"); err != nil || r.Email != "a@example.com" {
		t.Errorf("after the stall: %+v, %v", r, err)
	}
}

// A consumer stops within its drain bound when NATS stops answering (a black hole, a stopped
// server: the connection still looks up): its pending pull is left behind instead of waited for
// until the client declares the connection stale, and nothing is handled after Run returned.
func TestConsumerStopsPromptlyWhileNATSIsBlackHoled(t *testing.T) {
	t.Parallel()
	p := startProxied(t)
	js, _ := jetstream.New(p.worker)
	spec := queue.JobsConsumer(4, 5*time.Second)
	c := queue.NewConsumer(js, spec, queue.Layout{}, 4, quiet)
	var afterStop atomic.Bool
	var stopped atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(m jetstream.Msg) {
			if stopped.Load() {
				afterStop.Store(true)
			}
			_ = m.Ack()
		})
	}()
	wait.For(t, 5*time.Second, "consumer running", func() bool { return c.Check(context.Background()) == nil })
	// The link goes silent, losing nothing (a partition that heals): the pull in flight waits on
	// it, and messages published meanwhile are delivered to that pull once the link is back —
	// after Run has returned, to the reader it left behind.
	p.proxy.Pause()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		stopped.Store(true)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if d := time.Since(start); d > 2500*time.Millisecond {
			t.Errorf("Run took %v to stop, want about the 1 s drain bound", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return 15 s after its context ended")
	}
	const n = 5
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	for i := range n {
		if _, err := p.direct.Publish(pctx, queue.SubjectJob, fmt.Appendf(nil, "job %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	p.proxy.Resume()
	time.Sleep(500 * time.Millisecond)
	if afterStop.Load() {
		t.Error("a message was handled after Run returned")
	}
	// Nothing was lost either: what the left-behind pull got was handed back, and another
	// consumer (a replica, or this one started again) gets every message.
	again := queue.NewConsumer(p.direct, spec, queue.Layout{}, 4, quiet)
	got := make(chan string, n)
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	go func() {
		_ = again.Run(actx, func(m jetstream.Msg) {
			got <- string(m.Data())
			_ = m.Ack()
		})
	}()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case d := <-got:
			seen[d] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d messages handled after the restart: %v", len(seen), n, seen)
		}
	}
}
