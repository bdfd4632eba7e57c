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
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// slowCreate answers every Create only after delay: a NATS that answers, slowly (a loaded R3
// cluster, a cross-zone round trip).
type slowCreate struct {
	jetstream.KeyValue
	delay time.Duration
}

func (s *slowCreate) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.KeyValue.Create(ctx, key, value, opts...)
}

// An address whose every slot another worker holds, asked for by a worker whose NATS answers
// slowly: the try's budget ends part-way through the slots, each found taken. The bucket answered
// — the address is full — so the worker waits; opening a session without a lease would put the
// fleet over the cap while NATS works.
func TestSlowBucketOnAFullAddressMeansWaiting(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx := context.Background()
	layout := queue.Layout{Prefix: "slowfull"}
	holder, err := New(ctx, js, layout, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := New(ctx, js, layout, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	const max = 20
	ip := netip.MustParseAddr("192.0.2.78")
	for open := range max {
		if _, err := holder.Slots.Acquire(ctx, ip, max, open); err != nil {
			t.Fatal(err)
		}
	}
	waiter.Slots.b.kv = &slowCreate{KeyValue: waiter.Slots.b.kv, delay: 40 * time.Millisecond}

	// As the prober asks: within 500 ms, here 12 or so of the 20 slots.
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	l, err := waiter.Slots.Acquire(tctx, ip, max, 0)
	if err == nil {
		unleased := waiter.Slots.Unleased()
		l.Release()
		t.Fatalf("a session on an address whose %d slots are all held (%d without a lease): the fleet goes over its cap", max, unleased)
	}
	if !errors.Is(err, smtp.ErrNoSlot) {
		t.Errorf("Acquire: %v, want ErrNoSlot", err)
	}
	// Nor do the next sessions skip the bucket as if it were unreachable.
	tctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if l, err := waiter.Slots.Acquire(tctx, ip, max, 0); err == nil {
		l.Release()
		t.Fatal("the next try opened a session without a lease")
	}
}
