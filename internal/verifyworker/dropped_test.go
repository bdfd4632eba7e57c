package verifyworker

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/verdict"
)

// callsPipeline counts the addresses it is asked to verify.
type callsPipeline struct{ calls atomic.Int64 }

func (p *callsPipeline) Verify(_ context.Context, email string) verdict.Result {
	p.calls.Add(1)
	r := verdict.Result{Email: email}
	r.Apply(verdict.OutcomeDeliverable)
	return r
}

func (p *callsPipeline) VerifyBatch(ctx context.Context, emails []string, each func(int, verdict.Result)) []verdict.Result {
	out := make([]verdict.Result, len(emails))
	for i, e := range emails {
		out[i] = p.Verify(ctx, e)
		if each != nil {
			each(i, out[i])
		}
	}
	return out
}

// Each way a worker drops a batch or stream item without probing it (items.go) is counted, by
// reason, in mailvet_verify_items_dropped_total (docs/operations.md): a copy that may have sat
// past AckWait in the pull buffer, a copy of an item the worker already holds, and an item gone
// from the stream by the time its slot came.
func TestDroppedItemsAreCounted(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const ackWait = 2 * time.Second
	reg := prometheus.NewRegistry()
	pipe := &callsPipeline{}
	w := New(nc, js, pipe, app.NewLogger(io.Discard, "test"), reg, Options{ItemAckWait: ackWait})
	if n, err := testutil.GatherAndCount(reg, "mailvet_verify_items_dropped_total"); err != nil || n != 3 {
		t.Fatalf("%d series of mailvet_verify_items_dropped_total registered (%v), want one per reason from the start", n, err)
	}
	dropped := func(reason string) float64 { return testutil.ToFloat64(w.dropped.WithLabelValues(reason)) }

	spec := queue.VerifyItemsConsumer(4, ackWait)
	cons, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, queue.SubjectVerifyItemPrefix+"b.0", []byte(`{"email":"ann@example.com"}`)); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := <-batch.Messages()
	if m == nil {
		t.Fatal("no item delivered")
	}

	if q := w.intake(m, ackWait); q != nil {
		t.Fatal("an item that may have outlived its AckWait in the pull buffer was taken")
	}
	q := w.intake(m, 0)
	if q == nil {
		t.Fatal("a fresh item was not taken")
	}
	if w.intake(m, 0) != nil {
		t.Fatal("a second copy of a held item was taken")
	}
	// Its caller is answered without it, and the dispatcher withdraws it (queue.Dispatcher);
	// the item has waited for its slot meanwhile.
	stream, err := js.Stream(ctx, queue.StreamVerify)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	q.taken = time.Now().Add(-time.Second)
	w.verifyItems([]*queued{q})
	if n := pipe.calls.Load(); n != 0 {
		t.Errorf("%d addresses probed, want none", n)
	}
	for _, reason := range []string{dropStale, dropHeld, dropGone} {
		if got := dropped(reason); got != 1 {
			t.Errorf("dropped{reason=%q} = %v, want 1", reason, got)
		}
	}
}
