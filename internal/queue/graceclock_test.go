package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A batch that is asking again for its missing items when the broker stops answering (a stream
// info request, a publish: each bounded by PublishTimeout) still ends ListGrace after the link
// is seen down, not that plus the time those requests took to give up: they are cut off with
// the link, so the batch's clock starts when the link goes down.
func TestBatchGraceCountsFromTheLinkGoingDown(t *testing.T) {
	t.Parallel()
	batchEndsAtListGrace(t, time.Second)
}

// The same while nats.go dials again. Once its pings (PingInterval × MaxPingsOutstanding) give
// the connection up, nats.go dials the proxy, which accepts but does not answer (a frozen server),
// and waiting for its INFO holds the connection's lock for up to its 5 s connect timeout. A batch
// that waited on that lock to unsubscribe its inbox would end that much after ListGrace (3–5 s
// seen with NATS frozen by SIGSTOP and the default 10 s ListGrace). The dispatcher's clock runs
// with real time until the client is dialling, then jumps past ListGrace: the batch must end at
// once, not when the dial gives up.
func TestBatchGraceOutlastsAReconnectToAFrozenServer(t *testing.T) {
	t.Parallel()
	p := startProxied(t) // no worker takes batch items: the batch keeps asking again
	clock := testclock.New(time.Now())
	p.d.Now = clock.Now
	p.d.ListGrace, p.d.StallAfter, p.d.PublishTimeout = 10*time.Second, 10*time.Millisecond, 3*time.Second
	stopTicking := make(chan struct{})
	defer close(stopTicking)
	go func() { // real time passes on the dispatcher's clock too: the batch asks again as usual
		for tick := time.NewTicker(10 * time.Millisecond); ; {
			select {
			case <-tick.C:
				clock.Add(10 * time.Millisecond)
			case <-stopTicking:
				tick.Stop()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var ended time.Time
	go func() {
		_, err := p.d.VerifyMany(ctx, []string{"a@example.com", "b@example.com"}, nil)
		ended = time.Now()
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // published, asking again every few tens of ms
	p.proxy.Hold()
	// Cut at the end fails nats.go's dial at once, so that closing the clients does not wait
	// for its connect timeout.
	defer p.proxy.Cut()
	wait.For(t, 5*time.Second, "the link to go down", func() bool { return !p.d.Up() })
	wait.For(t, 10*time.Second, "the client to give the connection up", func() bool { return !p.api.IsConnected() })
	time.Sleep(500 * time.Millisecond) // past ReconnectWait and its jitter: nats.go is dialling
	select {
	case err := <-done:
		t.Fatalf("the batch ended (%v) before ListGrace had passed on its clock", err)
	default:
	}
	jumped := time.Now()
	clock.Add(p.d.ListGrace)
	select {
	case err := <-done:
		if !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("batch ended with %v, want ErrUnavailable", err)
		}
		after := ended.Sub(jumped)
		t.Logf("batch ended %v after ListGrace had passed, nats.go dialling", after.Round(time.Millisecond))
		if after > 700*time.Millisecond {
			t.Errorf("batch ended %v after ListGrace had passed; want a tick (200 ms) or so", after.Round(time.Millisecond))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the batch did not end")
	}
}

func batchEndsAtListGrace(t *testing.T, grace time.Duration) {
	p := startProxied(t) // no worker takes batch items: the batch keeps asking again
	p.d.ListGrace, p.d.StallAfter, p.d.PublishTimeout = grace, 10*time.Millisecond, 3*time.Second
	link := queue.Watch(p.api)
	defer link.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var ended time.Time
	go func() {
		_, err := p.d.VerifyMany(ctx, []string{"a@example.com", "b@example.com"}, nil)
		ended = time.Now()
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // published, asking again every few tens of ms
	p.proxy.Hold()
	wait.For(t, 5*time.Second, "the link to go down", func() bool { return !link.Up() })
	down := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("batch ended with %v, want ErrUnavailable", err)
		}
		after := ended.Sub(down)
		t.Logf("batch ended %v after the link was seen down (ListGrace %v)", after.Round(time.Millisecond), grace)
		if after > p.d.ListGrace+700*time.Millisecond {
			t.Errorf("batch ended %v after the link went down; want ListGrace (%v) and a tick", after.Round(time.Millisecond), grace)
		}
	case <-time.After(grace + 15*time.Second):
		t.Fatal("the batch did not end")
	}
}
