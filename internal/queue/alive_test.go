package queue_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
)

// A worker that has taken items and is busy with them has no pull request open; it is still a
// worker, and "no verifier worker is running" would be a false 503. With no consumer at all,
// nobody is there.
func TestWorkersAliveWhileBusy(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	defer d.Close()
	clock := testclock.New(time.Now()) // moved by hand past WorkersGone below
	d.Now = clock.Now
	if d.WorkersAlive(ctx) {
		t.Fatal("alive before any worker made its consumer")
	}
	spec := queue.VerifyItemsConsumer(1, time.Minute)
	cons, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Config)
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkersAlive(ctx) {
		t.Fatal("alive with a consumer nobody pulls from")
	}
	for i := range 2 {
		if _, err := js.Publish(ctx, queue.SubjectVerifyItemPrefix+"b."+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var taken []jetstream.Msg
	for m := range batch.Messages() {
		taken = append(taken, m) // taken and not acknowledged: a busy worker, no pull request open
	}
	if len(taken) != 2 {
		t.Fatalf("fetched %d", len(taken))
	}
	if !d.WorkersAlive(ctx) {
		t.Error("a busy worker is not seen")
	}

	// The worker finishes and vanishes (its pulls lost with a NATS node, say): for WorkersGone
	// it is still taken to be there, then no longer.
	for _, m := range taken {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !d.WorkersAlive(ctx) {
		t.Error("workers seen a moment ago are taken for gone")
	}
	clock.Add(d.WorkersGone - time.Millisecond)
	if !d.WorkersAlive(ctx) {
		t.Error("workers seen just under WorkersGone ago are taken for gone")
	}
	clock.Add(2 * time.Millisecond)
	if d.WorkersAlive(ctx) {
		t.Error("workers gone for longer than WorkersGone are still taken to be there")
	}
}
