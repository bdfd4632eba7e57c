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
