package account

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// LinkCustomer records a customer once: again with the same one is a no-op, and neither another
// customer for the account nor the account's customer for another account is accepted.
func TestLinkCustomer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.New(t))
	a, err := s.Create(ctx, NewAccount{Tier: plan.Free})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, NewAccount{Tier: plan.Free})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LinkCustomer(ctx, a.ID, "cus_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.LinkCustomer(ctx, a.ID, "cus_a"); err != nil {
		t.Fatalf("same customer again: %v", err)
	}
	if err := s.LinkCustomer(ctx, a.ID, "cus_other"); !errors.Is(err, ErrCustomerTaken) {
		t.Fatalf("another customer: %v", err)
	}
	if err := s.LinkCustomer(ctx, b.ID, "cus_a"); !errors.Is(err, ErrCustomerTaken) {
		t.Fatalf("a's customer for b: %v", err)
	}
	if err := s.LinkCustomer(ctx, "00000000-0000-4000-8000-000000000000", "cus_x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	got, _ := s.Get(ctx, a.ID)
	if got.StripeCustomerID == nil || *got.StripeCustomerID != "cus_a" {
		t.Fatalf("customer = %v", got.StripeCustomerID)
	}
}

// The provisioning key is reported while active, and the spend cap refuses NaN and infinities.
func TestProvisioningKeyAndSpendCapBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.New(t))
	a, err := s.Create(ctx, NewAccount{Tier: plan.Builder})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := s.ProvisioningKey(ctx, a.ID); err != nil || k != nil {
		t.Fatalf("before: %v %v", k, err)
	}
	created, err := s.CreateProvisioningKey(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := s.ProvisioningKey(ctx, a.ID); err != nil || k == nil || k.ID != created.ID || k.Prefix != created.Prefix {
		t.Fatalf("active: %v %v", k, err)
	}
	if _, err := s.RevokeProvisioningKey(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if k, err := s.ProvisioningKey(ctx, a.ID); err != nil || k != nil {
		t.Fatalf("after revoking: %v %v", k, err)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), -1, 2e9} {
		if err := s.SetSpendCap(ctx, a.ID, &v); err == nil {
			t.Errorf("spend cap %v accepted", v)
		}
	}
}

// ReplaceProvisioningKeyOnce keeps one active provisioning key: with none it creates one, with
// one it revokes it and creates the next, and concurrent replacements take turns on the account
// row rather than meet the one-key index; a form token replaces once.
func TestReplaceProvisioningKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.New(t))
	a, err := s.Create(ctx, NewAccount{Tier: plan.Builder})
	if err != nil {
		t.Fatal(err)
	}
	old, first, err := s.ReplaceProvisioningKeyOnce(ctx, a.ID, "")
	if err != nil || old != nil {
		t.Fatalf("replacing none: %v %v", old, err)
	}
	old, second, err := s.ReplaceProvisioningKeyOnce(ctx, a.ID, "tok-1")
	if err != nil || old == nil || old.ID != first.ID || second.ID == first.ID {
		t.Fatalf("replacing %s: revoked %v, created %s, %v", first.ID, old, second.ID, err)
	}
	var dup *KeyCreatedError
	if _, _, err := s.ReplaceProvisioningKeyOnce(ctx, a.ID, "tok-1"); !errors.As(err, &dup) || dup.Key.ID != second.ID {
		t.Fatalf("the same form again: %v, want a *KeyCreatedError naming %s", err, second.ID)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, _, err := s.ReplaceProvisioningKeyOnce(ctx, a.ID, "")
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent replacement: %v", err)
		}
	}
	if k, err := s.ProvisioningKey(ctx, a.ID); err != nil || k == nil {
		t.Fatalf("after the replacements: %v %v", k, err)
	}
}
