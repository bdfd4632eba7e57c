package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
)

func checkoutEvent(t *testing.T, id, account, customer string) stripe.Event {
	t.Helper()
	obj, _ := json.Marshal(map[string]any{"id": "cs_1", "object": "checkout.session", "client_reference_id": account,
		"customer": customer, "mode": "subscription"})
	body, _ := json.Marshal(map[string]any{"id": id, "type": "checkout.session.completed", "created": time.Now().Unix(),
		"data": map[string]any{"object": json.RawMessage(obj)}})
	var e stripe.Event
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// A completed Checkout links its customer to the account of client_reference_id, and the
// subscription event that follows then moves the tier; a customer is never taken over.
func TestCheckoutCompletedLinksCustomerThenSubscriptionMovesTier(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	const acct, other = "0b6f7d8e-3333-4c3e-9a55-0000000000c1", "0b6f7d8e-3333-4c3e-9a55-0000000000c2"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ('`+acct+`', 'free'), ('`+other+`', 'free')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	ctx := context.Background()
	if out, err := ev.Apply(ctx, checkoutEvent(t, "evt_c1", acct, "cus_9")); err != nil || out != Applied {
		t.Fatalf("checkout: %v %v", out, err)
	}
	// Another account's Checkout naming the same customer does not take it over.
	if _, err := ev.Apply(ctx, checkoutEvent(t, "evt_c2", other, "cus_9")); err != nil {
		t.Fatal(err)
	}
	if out, err := ev.Apply(ctx, event(t, "evt_s1", time.Now(), "active")); err != nil || out != Applied {
		t.Fatalf("subscription: %v %v", out, err)
	}
	var tier string
	var cus *string
	if err := pool.QueryRow(ctx, `SELECT tier, stripe_customer_id FROM accounts WHERE id = $1`, acct).Scan(&tier, &cus); err != nil {
		t.Fatal(err)
	}
	if tier != "scale" || cus == nil || *cus != "cus_9" {
		t.Fatalf("account = %s %v, want scale cus_9", tier, cus)
	}
	if err := pool.QueryRow(ctx, `SELECT stripe_customer_id FROM accounts WHERE id = $1`, other).Scan(&cus); err != nil || cus != nil {
		t.Fatalf("other account's customer = %v (%v), want none", cus, err)
	}
	if out, _ := ev.Apply(ctx, checkoutEvent(t, "evt_c3", "not-a-uuid", "cus_x")); out != UnknownCustomer {
		t.Fatalf("unknown reference: %v", out)
	}
}

// Checkout against stripe-mock: a customer is created when there is none, and the session URL
// comes back; a tier without a configured price is refused before Stripe is asked.
func TestCheckoutURLAgainstStripeMock(t *testing.T) {
	t.Parallel()
	s := NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: stripetest.URL(t),
		Prices: map[string]plan.Tier{"price_b": plan.Builder}})
	ctx := context.Background()
	r := CheckoutRequest{AccountID: "0b6f7d8e-3333-4c3e-9a55-0000000000c1", Email: "ann@example.com", Tier: plan.Builder,
		SuccessURL: "https://mailvet.example/dashboard/billing?checkout=done", CancelURL: "https://mailvet.example/dashboard/billing"}
	cus, err := s.PrepareCustomer(ctx, r)
	if err != nil || !strings.HasPrefix(cus, "cus_") {
		t.Fatalf("customer %q: %v", cus, err)
	}
	r.CustomerID = cus
	u, err := s.CheckoutURL(ctx, r)
	if err != nil || !strings.HasPrefix(u, "https://") {
		t.Fatalf("checkout URL %q: %v", u, err)
	}
	if !s.Sells(plan.Builder) || s.Sells(plan.Scale) || s.Sells(plan.Free) {
		t.Fatal("Sells disagrees with the configured prices")
	}
	r.Tier = plan.Scale
	if _, err := s.CheckoutURL(ctx, r); !errors.Is(err, ErrNoPrice) {
		t.Fatalf("scale without a price: %v", err)
	}
	if _, err := NewStripe(Config{}).PrepareCustomer(ctx, r); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("unconfigured: %v", err)
	}
}

// Subscribed asks Stripe for the customer's subscriptions and counts those that pay as the webhook
// does: against stripe-mock (whose customer always has an active subscription) the request is one
// Stripe accepts; against a Stripe with a given answer, only active, trialing and past_due count,
// and Stripe unreachable is the outage error the dashboard answers 503 for.
func TestSubscribedAgainstStripe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mock := NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: stripetest.URL(t)})
	if paying, err := mock.Subscribed(ctx, "cus_mock"); err != nil || !paying {
		t.Fatalf("stripe-mock: %v, %v; want its active subscription found", paying, err)
	}
	answer := func(statuses ...string) string {
		var data []string
		for i, st := range statuses {
			data = append(data, fmt.Sprintf(`{"id": "sub_%d", "object": "subscription", "status": %q}`, i, st))
		}
		return `{"object": "list", "url": "/v1/subscriptions", "has_more": false, "data": [` + strings.Join(data, ",") + `]}`
	}
	for _, tt := range []struct {
		statuses []string
		paying   bool
	}{
		{nil, false},
		{[]string{"incomplete_expired", "unpaid", "incomplete", "paused"}, false},
		{[]string{"unpaid", "past_due"}, true},
		{[]string{"trialing"}, true},
		{[]string{"active"}, true},
	} {
		var customer string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			customer = r.URL.Query().Get("customer")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(answer(tt.statuses...)))
		}))
		s := NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: srv.URL})
		paying, err := s.Subscribed(ctx, "cus_42")
		srv.Close()
		if err != nil || paying != tt.paying || customer != "cus_42" {
			t.Errorf("%v: %v, %v (asked for %q); want %v", tt.statuses, paying, err, customer, tt.paying)
		}
	}
	down := NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: "http://127.0.0.1:1"})
	if _, err := down.Subscribed(ctx, "cus_42"); !errors.Is(err, ErrProviderUnreachable) {
		t.Errorf("Stripe unreachable: %v", err)
	}
	if _, err := NewStripe(Config{}).Subscribed(ctx, "cus_42"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("unconfigured: %v", err)
	}
}
