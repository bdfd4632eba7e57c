package fleet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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

// lostAnswer stores every Create, and then loses its answer, as a caller that gives up while its
// create is on its way (a batch cut short, a probe budget spent) does: NATS has the key, the
// worker does not know it.
type lostAnswer struct{ jetstream.KeyValue }

func (l *lostAnswer) Create(_ context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, err := l.KeyValue.Create(context.Background(), key, value, opts...); err != nil {
		return 0, err
	}
	return 0, context.DeadlineExceeded
}

// A slot key stored by a create whose answer the worker never got names the worker, which holds
// no lease on it: nobody would release it, and the slot would stay taken for the key's whole TTL.
// The worker looks for it and deletes it (docs/fleet.md, "A create whose answer was lost"). The
// key given back is counted in mailvet_smtp_slots_given_back_total, and the session the failed
// create left to open without a lease in mailvet_smtp_sessions_unleased_total (docs/operations.md).
func TestSlotStoredByALostCreateIsGivenBack(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx := context.Background()
	f, err := New(ctx, js, queue.Layout{Prefix: "lostcreate"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A worker of its own on the same bucket, whose creates lose their answers.
	kv, fb := f.Slots.b.kv, f.Slots.b
	reg := prometheus.NewRegistry()
	s := newSlots(&bucket{js: fb.js, layout: fb.layout, base: fb.base, ttl: fb.ttl, log: fb.log, kv: &lostAnswer{KeyValue: kv}}, f.Slots.ttl, reg)
	defer s.close()
	ip := netip.MustParseAddr("192.0.2.79")
	l, err := s.Acquire(ctx, ip, 1, 0)
	if err != nil {
		t.Fatalf("Acquire after a lost create: %v, want a session without a lease (the fallback)", err)
	}
	l.Release()
	if n := testutil.ToFloat64(s.unleasedOpened); n != 1 {
		t.Errorf("mailvet_smtp_sessions_unleased_total = %v, want 1", n)
	}
	key := addrKey(ip) + ".0"
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// The count follows the delete's answer.
			for end := time.Now().Add(time.Second); testutil.ToFloat64(s.givenBack) == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := testutil.ToFloat64(s.givenBack); n != 1 {
				t.Errorf("mailvet_smtp_slots_given_back_total = %v, want 1", n)
			}
			if n, err := testutil.GatherAndCount(reg, "mailvet_smtp_slots_given_back_total", "mailvet_smtp_sessions_unleased_total"); err != nil || n != 2 {
				t.Errorf("%d of the 2 slot counters registered (%v)", n, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot key %s still held by nobody 3 s after its create's answer was lost (TTL %v)", key, s.ttl)
		}
	}
}
