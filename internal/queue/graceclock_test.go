package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
)

// A batch that is asking again for its missing items when the broker stops answering (a stream
// info request, a publish: each bounded by PublishTimeout) still ends ListGrace after the link
// is seen down, not that plus the time those requests took to give up: they are cut off with
// the link, so the batch's clock starts when the link goes down.
func TestBatchGraceCountsFromTheLinkGoingDown(t *testing.T) {
	t.Parallel()
	p := startProxied(t) // no worker takes batch items: the batch keeps asking again
	p.d.ListGrace, p.d.StallAfter, p.d.PublishTimeout = time.Second, 10*time.Millisecond, 3*time.Second
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
	eventually(t, "the link to go down", 5*time.Second, func() bool { return !link.Up() })
	down := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("batch ended with %v, want ErrUnavailable", err)
		}
		after := ended.Sub(down)
		t.Logf("batch ended %v after the link was seen down (ListGrace 1s)", after.Round(time.Millisecond))
		if after > p.d.ListGrace+700*time.Millisecond {
			t.Errorf("batch ended %v after the link went down; want ListGrace (1s) and a tick", after.Round(time.Millisecond))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the batch did not end")
	}
}
