package fleet_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A bucket NATS has lost (a server restarted without its store) comes back after the first
// operation that meets its absence within that operation's own short budget: a slot asked for
// with the 500 ms the prober gives it, a cached answer read with 200 ms. Such an operation ends
// in a deadline, not in "not found" (a write to a lost bucket is retried past 500 ms), and until
// the bucket is back every new SMTP session waits out that budget and the fleet-wide cap is off.
func TestLostBucketComesBackAfterOneTimedOutOperation(t *testing.T) {
	_, js := natstest.Connect(t)
	layout := queue.Layout{Prefix: "healtest"}
	fl, err := fleet.New(t.Context(), js, layout, fleet.Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	ip := netip.MustParseAddr("203.0.113.7")

	for _, c := range []struct {
		base string
		op   func()
	}{
		{queue.BucketSMTPSlots, func() {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			if l, err := fl.Slots.Acquire(ctx, ip, 20, 0); err == nil {
				l.Release()
			}
		}},
		{queue.BucketMX, func() {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			fl.MX.Get(ctx, "example.com")
		}},
		{queue.BucketCatchAll, func() {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			fl.CatchAll.Get(ctx, "example.com")
		}},
	} {
		name := layout.Name(c.base)
		if err := js.DeleteKeyValue(t.Context(), name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		time.Sleep(1100 * time.Millisecond) // past the last heal's rate limit
		c.op()
		wait.For(t, 3*time.Second, name+" to be re-created by an operation that met its absence", func() bool {
			_, err := js.KeyValue(t.Context(), name)
			if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
				t.Fatalf("%s: %v", name, err)
			}
			return err == nil
		})
	}

	// With the slots bucket back, a slot is a lease again, taken at once.
	time.Sleep(1100 * time.Millisecond) // past askAgainAfter of the failed Acquire
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := fl.Slots.Acquire(ctx, ip, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if took := time.Since(start); took > 200*time.Millisecond || fl.Slots.Held() != 1 {
		t.Fatalf("slot after the bucket came back: %s, %d leases held", took, fl.Slots.Held())
	}
}
