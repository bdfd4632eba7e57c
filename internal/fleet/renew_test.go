package fleet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// afterUpdate runs a hook once the bucket has answered an Update, before the caller sees it: the
// moment a session's release can slip in between a renewal's write and its bookkeeping.
type afterUpdate struct {
	jetstream.KeyValue
	hook func()
}

func (a *afterUpdate) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := a.KeyValue.Update(ctx, key, value, last)
	a.hook()
	return rev, err
}

// A session released while its lease's renewal is on its way: the release deletes the key at the
// revision before the renewal's, which misses; the renewal then deletes it at its own, so the slot
// is free at once, not after the lease's TTL.
func TestReleaseDuringRenewalFreesTheSlot(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx := context.Background()
	f, err := New(ctx, js, queue.Layout{Prefix: "renewrace"}, Options{LeaseTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ip := netip.MustParseAddr("192.0.2.77")
	got, err := f.Slots.Acquire(ctx, ip, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := got.(*lease)
	f.Slots.b.kv = &afterUpdate{KeyValue: f.Slots.b.kv, hook: func() { l.release(ctx) }}
	l.renew()

	_, err = f.Slots.b.kv.Get(ctx, l.key)
	if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		t.Fatalf("the released slot's key is still there (%v): taken by nobody until its TTL", err)
	}
}
