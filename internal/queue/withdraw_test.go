package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A batch whose caller is answered without some of its items (here its deadline passes and no
// worker is there) has them taken out of the VERIFY stream, so that no worker probes them for
// nobody, and counts them for mailvet_verify_items_withdrawn_total (docs/operations.md).
func TestUnansweredItemsAreWithdrawnAndCounted(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	missing, err := d.VerifyMany(ctx, []string{"a@example.com", "b@example.com", "c@example.com"}, nil)
	if !errors.Is(err, queue.ErrTimeout) || len(missing) != 3 {
		t.Fatalf("missing %v, err %v; want all 3 and ErrTimeout", missing, err)
	}
	wait.For(t, 5*time.Second, "the items to be withdrawn and counted", func() bool {
		return verifyItems(t, js) == 0 && d.WithdrawnItems() == 3
	})
}

// A batch that times out while NATS is slow answers at its deadline: taking its items out of
// VERIFY waits for NATS, after the answer, and they are still taken out once NATS answers.
func TestSlowNATSDoesNotDelayAnAbandonedBatchsAnswer(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	_, direct := natstest.ConnectTo(t, s.ClientURL())
	proxy, nc, js := natstest.Proxied(t, s.ClientURL(), "api-under-test")
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	defer d.Close()
	d.PublishTimeout = 5 * time.Second

	// Well under ProbeTimeout, so that the link stays up while NATS is stalled: the dispatcher
	// answers ErrTimeout and sends its purge into the stall.
	const deadline, margin = 600 * time.Millisecond, 250 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	type outcome struct {
		missing []int
		err     error
		took    time.Duration
	}
	done := make(chan outcome, 1)
	go func() {
		m, err := d.VerifyMany(ctx, []string{"a@example.com", "b@example.com", "c@example.com"}, nil)
		done <- outcome{m, err, time.Since(start)}
	}()
	wait.For(t, deadline/2, "the items to be stored", func() bool { return verifyItems(t, direct) == 3 })
	proxy.Pause()

	var o outcome
	select {
	case o = <-done:
	case <-time.After(time.Until(start.Add(deadline + margin))):
		t.Errorf("no answer %v after the batch's %v deadline", margin, deadline)
		proxy.Resume()
		o = <-done
	}
	if !errors.Is(o.err, queue.ErrTimeout) || len(o.missing) != 3 {
		t.Errorf("missing %v, err %v; want all 3 and ErrTimeout", o.missing, o.err)
	}
	t.Logf("answered after %v", o.took.Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond) // NATS still slow after the answer
	proxy.Resume()
	wait.For(t, 5*time.Second, "the items to be withdrawn", func() bool {
		return verifyItems(t, direct) == 0 && d.WithdrawnItems() == 3
	})
}

// At most a few purges are in flight per dispatcher: while NATS is stalled, the abandoned batches
// beyond them leave their items in VERIFY, counted for mailvet_verify_items_not_withdrawn_total
// (their deadline stops them at the workers). Close waits for the purges in flight.
func TestWithdrawalsBeyondTheBoundAreDroppedAndCounted(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	_, direct := natstest.ConnectTo(t, s.ClientURL())
	proxy, nc, js := natstest.Proxied(t, s.ClientURL(), "api-under-test")
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	t.Cleanup(d.Close)
	d.PublishTimeout = 5 * time.Second

	const batches, bound = 6, 4
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	errs := make(chan error, batches)
	for i := range batches {
		go func() {
			_, err := d.VerifyMany(ctx, []string{fmt.Sprintf("%d@example.com", i)}, nil)
			errs <- err
		}()
	}
	wait.For(t, 300*time.Millisecond, "the items to be stored", func() bool { return verifyItems(t, direct) == batches })
	proxy.Pause()
	for range batches {
		select {
		case err := <-errs:
			if !errors.Is(err, queue.ErrTimeout) {
				t.Errorf("a batch ended with %v, want ErrTimeout", err)
			}
		case <-time.After(time.Second):
			t.Fatal("a batch did not answer at its deadline")
		}
	}
	if n := d.NotWithdrawnItems(); n != batches-bound {
		t.Errorf("NotWithdrawnItems = %d while NATS is stalled, want %d", n, batches-bound)
	}
	proxy.Resume()
	d.Close()
	if n := d.WithdrawnItems(); n != bound {
		t.Errorf("WithdrawnItems = %d once Close returned, want %d", n, bound)
	}
	if n := verifyItems(t, direct); n != batches-bound {
		t.Errorf("%d items left in VERIFY, want the %d whose withdrawal was dropped", n, batches-bound)
	}
}

// verifyItems is the number of items in the VERIFY stream.
func verifyItems(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, queue.StreamVerify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
