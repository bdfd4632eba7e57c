package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/redact"
)

// ErrNoPrice: no Stripe price is configured for the tier asked for (MAILVET_STRIPE_PRICE_BUILDER,
// MAILVET_STRIPE_PRICE_SCALE), so it cannot be bought through Checkout.
var ErrNoPrice = errors.New("no Stripe price is configured for this tier")

// ErrAlreadySubscribed: the customer already has a subscription at Stripe that pays, whose events
// have not moved the account yet (Stripe's webhook is late or failing): a new Checkout session
// would charge the customer a second time.
var ErrAlreadySubscribed = errors.New("the customer already has a paying subscription at Stripe")

// CheckoutRequest is an upgrade from the dashboard (docs/dashboard.md, "How an upgrade works").
type CheckoutRequest struct {
	AccountID  string
	Email      string    // the dashboard user's address, given to a customer created here
	CustomerID string    // the account's Stripe customer; empty: create one first
	Tier       plan.Tier // the paid tier to subscribe to
	SuccessURL string
	CancelURL  string
	// ExpiresAt is when the session stops taking payment (Stripe allows 30 minutes to 24 hours);
	// zero leaves Stripe's default.
	ExpiresAt time.Time
}

// PrepareCustomer returns the request's customer, creating one in Stripe when it has none. The
// account id goes into the customer's metadata so that a customer can be traced back by hand.
func (s *Stripe) PrepareCustomer(ctx context.Context, r CheckoutRequest) (string, error) {
	if !s.configured {
		return "", ErrNotConfigured
	}
	if r.CustomerID != "" {
		return r.CustomerID, nil
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	params := &stripe.CustomerParams{Email: stripe.String(r.Email)}
	params.AddMetadata("mailvet_account_id", r.AccountID)
	params.Context = ctx
	c, err := s.customers.New(params)
	if err != nil {
		// Stripe's refusal of an address quotes it ("Invalid email address: …"), and the caller
		// logs the error.
		return "", redact.Address(stripeError(err), r.Email, "<the account's email>")
	}
	if c == nil || c.ID == "" {
		return "", fmt.Errorf("%w: Stripe created a customer without an id", ErrPortalUnavailable)
	}
	return c.ID, nil
}

// CheckoutURL opens a subscription Checkout session for r.CustomerID (PrepareCustomer's) and the
// price of r.Tier. client_reference_id carries the account id, which the checkout.session.completed
// event uses to link the customer should the account not have it yet (Events.Apply).
func (s *Stripe) CheckoutURL(ctx context.Context, r CheckoutRequest) (string, error) {
	if !s.configured {
		return "", ErrNotConfigured
	}
	price, ok := s.prices[r.Tier]
	if !ok || r.Tier == plan.Free {
		return "", ErrNoPrice
	}
	params := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		Customer:          stripe.String(r.CustomerID),
		ClientReferenceID: stripe.String(r.AccountID),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{{Price: stripe.String(price), Quantity: stripe.Int64(1)}},
		SuccessURL:        stripe.String(r.SuccessURL),
		CancelURL:         stripe.String(r.CancelURL),
	}
	if !r.ExpiresAt.IsZero() {
		params.ExpiresAt = stripe.Int64(r.ExpiresAt.Unix())
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	params.Context = ctx
	cs, err := s.checkouts.New(params)
	if err != nil {
		return "", stripeError(err)
	}
	if cs == nil || cs.URL == "" {
		return "", fmt.Errorf("%w: Stripe returned a Checkout session without a URL", ErrPortalUnavailable)
	}
	return cs.URL, nil
}

// Subscribed reports whether customerID has a subscription at Stripe that pays (active, trialing
// or past_due, as the webhook counts them: Events). The dashboard asks before it opens a new
// Checkout session for a customer it already had: the account's tier follows Stripe's webhook,
// so a customer who paid while the webhook was late or failing still looks free, and would pay
// again (docs/dashboard.md, "How an upgrade works").
func (s *Stripe) Subscribed(ctx context.Context, customerID string) (bool, error) {
	if !s.configured {
		return false, ErrNotConfigured
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	params := &stripe.SubscriptionListParams{Customer: stripe.String(customerID)}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	it := s.subscriptions.List(params)
	for it.Next() {
		if sub := it.Subscription(); sub != nil && paying(sub.Status) {
			return true, nil
		}
	}
	if err := it.Err(); err != nil {
		return false, stripeError(err)
	}
	return false, nil
}

// Sells reports whether tier can be bought through Checkout on this deployment.
func (s *Stripe) Sells(tier plan.Tier) bool {
	_, ok := s.prices[tier]
	return s.configured && ok && tier != plan.Free
}
