package verifyworker

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// The chunks a write handed out are published although NATS stops answering for a moment (here
// 1.5 s behind a black-holing proxy; a restarted server, or a connection reconnecting, refuses
// publishes the same way). A publish given up at once would leave the chunk to the sweep, 5
// minutes later, as a fault campaign saw after a NATS restart.
func TestChunkPublishOutlastsANATSBlip(t *testing.T) {
	t.Parallel()
	proxy, _, js := natstest.Proxied(t, natstest.URL(t), "runner-under-test")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := streamMsgs(t, ctx, js, queue.StreamLists)
	r := NewListRunner(nil, js, nil, app.NewLogger(io.Discard, "test"))

	proxy.Hold()
	go func() {
		time.Sleep(1500 * time.Millisecond)
		proxy.Restore()
	}()
	wctx, wcancel := context.WithTimeout(ctx, r.WriteBudget)
	defer wcancel()
	if err := r.publish(wctx, list.Written{Next: []list.Chunk{{ListID: uuid.New(), Chunk: 3}}}); err != nil {
		t.Fatalf("publish across a 1.5 s blip: %v", err)
	}
	if n := msgs(); n != 1 {
		t.Fatalf("%d chunk messages after the blip, want 1", n)
	}

	// NATS away for longer than the write's budget: the error comes back as an outage, so that the
	// chunk message is handed back and its redelivery publishes the chunk again.
	proxy.Hold()
	defer proxy.Restore()
	short, scancel := context.WithTimeout(ctx, 1200*time.Millisecond)
	defer scancel()
	if err := r.publish(short, list.Written{Next: []list.Chunk{{ListID: uuid.New(), Chunk: 4}}}); !outage(err) {
		t.Fatalf("publish past its budget: %v, want an outage", err)
	}
}
