package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
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

// The same with a ListGrace as long as nats.go takes to give the connection up
// (PingInterval × MaxPingsOutstanding), so that the batch ends while nats.go dials again: waiting
// for the INFO of a server that accepts but does not answer, it holds the connection's lock for
// up to its 5 s connect timeout, and a batch that waited on that lock to unsubscribe its inbox
// ended that much after ListGrace (4.8 s here; 3–5 s seen with NATS frozen by SIGSTOP and the
// default 10 s ListGrace).
func TestBatchGraceOutlastsAReconnectToAFrozenServer(t *testing.T) {
	t.Parallel()
	batchEndsAtListGrace(t, queue.PingInterval*queue.MaxPingsOutstanding)
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
