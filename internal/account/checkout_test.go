package account

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// An upgrade whose Stripe call is slow holds no lock on the account: its other writes go through
// meanwhile. A second upgrade at the same time waits for the first one's session instead of
// opening another, and a failed open gives the claim up at once.
func TestCheckoutHoldsNoAccountLockAcrossStripe(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	a, err := s.Create(ctx, NewAccount{Tier: plan.Free})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	inStripe, release := make(chan struct{}), make(chan struct{})
	var opened int
	var mu sync.Mutex
	slow := func(time.Time) (string, plan.Tier, error) {
		mu.Lock()
		opened++
		mu.Unlock()
		close(inStripe)
		<-release
		return "https://checkout.example/cs_1", plan.Builder, nil
	}
	type answer struct {
		co     OpenCheckout
		reused bool
		err    error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		co, reused, err := s.Checkout(ctx, a.ID, now, slow)
		first <- answer{co, reused, err}
	}()
	<-inStripe

	// The account's other writes while Stripe is slow: they would wait on the row lock.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cap := 50.0
	if err := s.SetSpendCap(wctx, a.ID, &cap); err != nil {
		t.Fatalf("spend cap while an upgrade waits for Stripe: %v", err)
	}
	if _, err := s.CreateStandardKey(wctx, a.ID, "meanwhile", func(plan.Tier) int { return 10 }); err != nil {
		t.Fatalf("key while an upgrade waits for Stripe: %v", err)
	}

	go func() {
		co, reused, err := s.Checkout(ctx, a.ID, now, func(time.Time) (string, plan.Tier, error) {
			t.Error("a second upgrade opened a session of its own")
			return "https://checkout.example/cs_2", plan.Builder, nil
		})
		second <- answer{co, reused, err}
	}()
	time.Sleep(300 * time.Millisecond) // the second upgrade is waiting for the first one's session
	close(release)
	f, g := <-first, <-second
	if f.err != nil || f.reused || f.co.URL != "https://checkout.example/cs_1" {
		t.Fatalf("first upgrade: %+v", f)
	}
	if g.err != nil || !g.reused || g.co.URL != f.co.URL {
		t.Fatalf("second upgrade: %+v, want the first one's session", g)
	}

	// A failed open gives the claim up: the next upgrade opens a session at once.
	b, err := s.Create(ctx, NewAccount{Tier: plan.Free})
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("stripe unreachable")
	if _, _, err := s.Checkout(ctx, b.ID, now, func(time.Time) (string, plan.Tier, error) { return "", "", down }); !errors.Is(err, down) {
		t.Fatalf("failed open: %v", err)
	}
	start := time.Now()
	co, _, err := s.Checkout(ctx, b.ID, now, func(time.Time) (string, plan.Tier, error) { return "https://checkout.example/cs_3", plan.Scale, nil })
	if err != nil || co.URL != "https://checkout.example/cs_3" || time.Since(start) > time.Second {
		t.Fatalf("after a failed open: %+v %v after %v", co, err, time.Since(start))
	}
}

// An upgrade that finds another one still opening its session after the claim's whole time (a
// process that died mid-call leaves its claim until then) is told so, and opens nothing.
func TestCheckoutPendingAfterTheClaimTime(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	s := NewStore(pool)
	ctx := context.Background()
	a, err := s.Create(ctx, NewAccount{Tier: plan.Free})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	pgtest.Exec(t, pool, `UPDATE accounts SET checkout_claimed_until = $2 WHERE id = $1`, a.ID, now.Add(time.Hour))
	start := time.Now()
	_, _, err = s.Checkout(ctx, a.ID, now, func(time.Time) (string, plan.Tier, error) {
		t.Error("opened a session while another upgrade holds the claim")
		return "", "", nil
	})
	if !errors.Is(err, ErrCheckoutPending) || time.Since(start) < checkoutClaim || time.Since(start) > checkoutClaim+3*time.Second {
		t.Errorf("%v after %v, want ErrCheckoutPending after about %v", err, time.Since(start), checkoutClaim)
	}
}
