// Package billing connects accounts to Stripe: it opens billing portal and Checkout sessions
// (docs/dashboard.md) and applies Stripe's subscription and Checkout webhook events to the
// accounts table, each event once and never an older one over a newer one.
package billing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/billingportal/session"
	checkoutsession "github.com/stripe/stripe-go/v76/checkout/session"
	"github.com/stripe/stripe-go/v76/customer"
	"github.com/stripe/stripe-go/v76/subscription"

	"github.com/mailvet/mailvet/internal/plan"
)

// Errors of the portal; internal/api maps them to the envelope.
var (
	// ErrPortalUnavailable: Stripe answered with an error or without a portal URL, or billing is
	// not configured on this server (ErrNotConfigured).
	ErrPortalUnavailable = errors.New("the billing provider did not return a portal URL")
	// ErrNotConfigured: this deployment has no STRIPE_SECRET_KEY, so no portal can be opened
	// until an operator sets one; unlike Stripe's own failures, retrying can never help.
	ErrNotConfigured = fmt.Errorf("%w: billing is not configured on this deployment (STRIPE_SECRET_KEY is not set)", ErrPortalUnavailable)
	// ErrProviderUnreachable: Stripe could not be reached at all (network failure or timeout).
	ErrProviderUnreachable = errors.New("the billing provider is unreachable")
)

// Stripe opens billing portal and Checkout sessions through the Stripe API (or stripe-mock in
// tests).
type Stripe struct {
	sessions  session.Client
	customers customer.Client
	checkouts checkoutsession.Client
	// subscriptions lists a customer's subscriptions before a second Checkout (Subscribed).
	subscriptions subscription.Client
	prices        map[plan.Tier]string // tier ⇒ Stripe price id (the reverse of Config.Prices)
	configured    bool
}

// Bounds of a Stripe call. Every call is made on a request's path (the management portal route,
// the dashboard's portal and upgrade buttons), so a Stripe that does not answer must become a
// clear 503 within seconds, not hold the request.
//
// CallTimeout bounds a whole call, its retry included: each call runs under a context deadline of
// CallTimeout (or the caller's, when that is earlier). AttemptTimeout bounds one HTTP attempt. A
// refused or reset connection fails within milliseconds and is retried once, after stripe-go's
// 0.5 s back-off (MaxNetworkRetries 1; POSTs carry an idempotency key, so a retry never opens a
// second session or customer). A timed-out attempt is followed only by what is left of
// CallTimeout: two full AttemptTimeouts plus the back-off (8.5 s) do not fit in 5 s, so a
// black-holed Stripe costs at most CallTimeout, not two attempts and the back-off. 4 s per
// attempt still leaves a slow but working Stripe (its calls take well under a second) time to
// answer.
const (
	CallTimeout    = 5 * time.Second
	AttemptTimeout = 4 * time.Second
)

// Config is what the Stripe client needs from the process configuration (docs/operations.md,
// "Configuration"); the API builds it.
type Config struct {
	// SecretKey is STRIPE_SECRET_KEY; empty means billing is not configured (ErrNotConfigured).
	SecretKey string
	// APIBase replaces Stripe's URL (MAILVET_STRIPE_API_BASE; stripe-mock in tests); empty
	// means Stripe's own.
	APIBase string
	// Prices maps a Stripe price id to its tier (MAILVET_STRIPE_PRICE_*).
	Prices map[string]plan.Tier
}

// NewStripe builds the client from cfg.
func NewStripe(cfg Config) *Stripe {
	bc := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: AttemptTimeout},
		MaxNetworkRetries: stripe.Int64(1),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.APIBase != "" {
		bc.URL = stripe.String(cfg.APIBase)
	}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, bc)
	prices := make(map[plan.Tier]string, len(cfg.Prices))
	for id, tier := range cfg.Prices {
		prices[tier] = id
	}
	return &Stripe{
		sessions:      session.Client{B: b, Key: cfg.SecretKey},
		customers:     customer.Client{B: b, Key: cfg.SecretKey},
		checkouts:     checkoutsession.Client{B: b, Key: cfg.SecretKey},
		subscriptions: subscription.Client{B: b, Key: cfg.SecretKey},
		prices:        prices,
		configured:    cfg.SecretKey != "",
	}
}

// PortalURL opens a billing portal session for customerID that returns the user to returnURL.
func (s *Stripe) PortalURL(ctx context.Context, customerID, returnURL string) (string, error) {
	if !s.configured {
		return "", ErrNotConfigured
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	params := &stripe.BillingPortalSessionParams{Customer: stripe.String(customerID), ReturnURL: stripe.String(returnURL)}
	params.Context = ctx
	ps, err := s.sessions.New(params)
	if err != nil {
		return "", stripeError(err)
	}
	if ps == nil || ps.URL == "" {
		return "", ErrPortalUnavailable
	}
	return ps.URL, nil
}

// stripeError sorts a failed Stripe call: an answer from Stripe is ErrPortalUnavailable with
// Stripe's reason, no answer at all is ErrProviderUnreachable. No answer is what net/http
// reports as a *url.Error (refused, reset, timed out, the call's deadline); an answer stripe-go
// could not read (a proxy's HTML page, a body that is not JSON) is an answer, not an outage.
func stripeError(err error) error {
	var (
		se *stripe.Error
		ue *url.Error
	)
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%w: stripe %s (HTTP %d): %s", ErrPortalUnavailable, se.Type, se.HTTPStatusCode, se.Msg)
	case errors.As(err, &ue), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", ErrProviderUnreachable, err)
	}
	return fmt.Errorf("%w: %w", ErrPortalUnavailable, err)
}
