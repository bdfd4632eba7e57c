package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
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
	if n := d.WithdrawnItems(); n != 3 {
		t.Errorf("WithdrawnItems = %d, want 3", n)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	stream, err := js.Stream(sctx, queue.StreamVerify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d items left in VERIFY after the caller was answered, want none", info.State.Msgs)
	}
}
