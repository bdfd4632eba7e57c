package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/plan"
)

// Outcome says what Apply did with an event; the webhook handler logs it and answers 200 in every
// case, because Stripe should not retry an event that was understood.
type Outcome string

// The outcomes of Apply.
const (
	Applied         Outcome = "applied"
	Duplicate       Outcome = "duplicate"        // the event id was processed before
	Stale           Outcome = "stale"            // older than the newest subscription event applied
	Ignored         Outcome = "ignored"          // an event type Mailvet does not act on
	UnknownCustomer Outcome = "unknown_customer" // no account has the subscription's customer
)

// ErrBadEvent means a subscription event whose object could not be read.
var ErrBadEvent = errors.New("malformed subscription event")

// Events applies Stripe webhook events to accounts.
type Events struct {
	pool   *pgxpool.Pool
	prices map[string]plan.Tier
}

// NewEvents returns an Events that maps subscription price ids to tiers with prices
// (config.StripePrices).
func NewEvents(pool *pgxpool.Pool, prices map[string]plan.Tier) *Events {
	return &Events{pool: pool, prices: prices}
}

// Apply processes one verified event. The event id is recorded in stripe_events in the same
// transaction as its effect, so a redelivered event is applied exactly once even when two API
// replicas receive it at the same moment.
func (ev *Events) Apply(ctx context.Context, e stripe.Event) (Outcome, error) {
	if e.ID == "" {
		return "", fmt.Errorf("%w: no event id", ErrBadEvent)
	}
	if len(e.ID) > maxStripeID || len(e.Type) > maxStripeID {
		return "", fmt.Errorf("%w: event id or type longer than %d bytes", ErrBadEvent, maxStripeID)
	}
	if err := checkTimes(e.Created); err != nil {
		return "", err
	}
	created := time.Unix(e.Created, 0).UTC()
	var out Outcome
	err := pgx.BeginFunc(ctx, ev.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO stripe_events (id, type, created) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			e.ID, string(e.Type), created)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			out = Duplicate
			return nil
		}
		switch e.Type {
		case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted":
			out, err = ev.applySubscription(ctx, tx, e, created)
			return err
		case "checkout.session.completed":
			out, err = ev.applyCheckout(ctx, tx, e)
			return err
		default:
			out = Ignored
			return nil
		}
	})
	return out, err
}

// applySubscription copies the subscription's lifecycle fields onto the account. The guard on
// billing_event_at makes late, older events no-ops; events of the same second apply in arrival
// order, which is the best Stripe's one-second resolution allows, except that a subscription's
// "created" event never undoes a later state of the same second. An event of another
// subscription of the customer that ends or does not pay leaves a paying one in place.
func (ev *Events) applySubscription(ctx context.Context, tx pgx.Tx, e stripe.Event, created time.Time) (Outcome, error) {
	if e.Data == nil || len(e.Data.Raw) == 0 {
		return "", fmt.Errorf("%w: no data.object", ErrBadEvent)
	}
	var sub stripe.Subscription
	if err := json.Unmarshal(e.Data.Raw, &sub); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if sub.Customer == nil || sub.Customer.ID == "" {
		return "", fmt.Errorf("%w: subscription has no customer", ErrBadEvent)
	}
	if len(sub.ID) > maxStripeID || len(sub.Customer.ID) > maxStripeID || len(sub.Status) > maxStripeID {
		return "", fmt.Errorf("%w: subscription, customer id or status longer than %d bytes", ErrBadEvent, maxStripeID)
	}
	if err := checkTimes(sub.CurrentPeriodStart, sub.CurrentPeriodEnd, sub.CanceledAt, sub.CancelAt,
		sub.TrialStart, sub.TrialEnd, sub.BillingCycleAnchor); err != nil {
		return "", err
	}
	var (
		accountID            string
		tier                 plan.Tier
		newest               *time.Time
		storedSub, storedSta *string
	)
	err := tx.QueryRow(ctx, `SELECT id, tier, billing_event_at, stripe_subscription_id, subscription_status
		FROM accounts WHERE stripe_customer_id = $1 FOR NO KEY UPDATE`,
		sub.Customer.ID).Scan(&accountID, &tier, &newest, &storedSub, &storedSta)
	if errors.Is(err, pgx.ErrNoRows) {
		return UnknownCustomer, nil
	}
	if err != nil {
		return "", err
	}
	if newest != nil && created.Before(*newest) {
		return Stale, nil
	}
	sameSub := storedSub != nil && *storedSub == sub.ID
	if newest != nil && created.Equal(*newest) && sameSub && e.Type == "customer.subscription.created" {
		// Stripe's times have one-second resolution: a "created" event of the same second as
		// one already applied for the subscription is its first state, never a later one (a
		// card charged at once makes created/incomplete and updated/active share their second).
		return Stale, nil
	}
	if !sameSub && storedSub != nil && storedSta != nil && paying(stripe.SubscriptionStatus(*storedSta)) &&
		(e.Type == "customer.subscription.deleted" || !paying(sub.Status)) {
		// A second subscription of the customer (a second checkout before the first one's
		// webhook arrived) that ends, or does not pay, while the one on record pays: the
		// account keeps the paying one's tier.
		return Stale, nil
	}
	status := string(sub.Status)
	switch {
	case e.Type == "customer.subscription.deleted":
		tier = plan.Free
		if status == "" {
			status = "canceled"
		}
	case paying(sub.Status):
		if t, ok := ev.tierOf(&sub); ok {
			tier = t
		}
	default:
		// incomplete, incomplete_expired, unpaid, canceled, paused: no paid tier without payment.
		tier = plan.Free
	}
	_, err = tx.Exec(ctx, `
		UPDATE accounts SET tier = $2, stripe_subscription_id = $3, subscription_status = $4,
			current_period_start = $5, current_period_end = $6, cancel_at_period_end = $7, canceled_at = $8,
			cancel_at = $9, trial_start = $10, trial_end = $11, billing_cycle_anchor = $12,
			billing_event_at = $13, updated_at = now(),
			-- A paid tier means the open Checkout session was paid: a later upgrade (after a
			-- cancellation) opens a new one.
			checkout_url = CASE WHEN $2 = 'free' THEN checkout_url END,
			checkout_tier = CASE WHEN $2 = 'free' THEN checkout_tier END,
			checkout_expires_at = CASE WHEN $2 = 'free' THEN checkout_expires_at END
		WHERE id = $1`,
		accountID, tier, sub.ID, status, unix(sub.CurrentPeriodStart), unix(sub.CurrentPeriodEnd),
		sub.CancelAtPeriodEnd, unix(sub.CanceledAt), unix(sub.CancelAt), unix(sub.TrialStart), unix(sub.TrialEnd),
		unix(sub.BillingCycleAnchor), created)
	if err != nil {
		return "", err
	}
	return Applied, nil
}

// paying lists the subscription states in which the customer has the paid tier: trialing and
// past_due keep access while Stripe retries the payment.
func paying(s stripe.SubscriptionStatus) bool {
	return s == "active" || s == "trialing" || s == "past_due"
}

// tierOf maps the subscription's first item price to a tier; an unknown price leaves the tier as
// it is rather than guessing.
func (ev *Events) tierOf(sub *stripe.Subscription) (plan.Tier, bool) {
	if sub.Items == nil {
		return "", false
	}
	for _, it := range sub.Items.Data {
		if it != nil && it.Price != nil {
			if t, ok := ev.prices[it.Price.ID]; ok {
				return t, true
			}
		}
	}
	return "", false
}

// Bounds on what a signed event may carry. Only the holder of the webhook secret can send an
// event, but a value the database or the account's JSON cannot hold must be a 400 (Stripe stops
// resending it), not a 500 that Stripe retries for days. Stripe's own ids are far shorter than
// maxStripeID; its times are Unix seconds, and an account's times are written as RFC 3339, which
// ends with the year 9999.
const (
	maxStripeID = 255
	maxUnix     = 253402300799 // 9999-12-31T23:59:59Z
)

// checkTimes refuses Unix times outside 1970 … 9999 (0 means "not set").
func checkTimes(ts ...int64) error {
	for _, t := range ts {
		if t < 0 || t > maxUnix {
			return fmt.Errorf("%w: time %d is outside 1970-01-01 … 9999-12-31", ErrBadEvent, t)
		}
	}
	return nil
}

// unix turns Stripe's Unix seconds (0 for "not set") into a nullable timestamp.
func unix(s int64) *time.Time {
	if s == 0 {
		return nil
	}
	t := time.Unix(s, 0).UTC()
	return &t
}

// applyCheckout links the customer of a completed Checkout session to the account it was opened
// for (client_reference_id, set by the dashboard: docs/dashboard.md). The dashboard records the
// customer before it sends anyone to Checkout, so this is the safety net for a crash in between;
// the tier itself moves with the customer.subscription.* events Stripe sends for the new
// subscription, which carry the price. An account that already has a different customer keeps it.
func (ev *Events) applyCheckout(ctx context.Context, tx pgx.Tx, e stripe.Event) (Outcome, error) {
	if e.Data == nil || len(e.Data.Raw) == 0 {
		return "", fmt.Errorf("%w: no data.object", ErrBadEvent)
	}
	var cs stripe.CheckoutSession
	if err := json.Unmarshal(e.Data.Raw, &cs); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if cs.ClientReferenceID == "" || cs.Customer == nil || cs.Customer.ID == "" {
		return Ignored, nil // not opened by the dashboard
	}
	if len(cs.Customer.ID) > maxStripeID {
		return "", fmt.Errorf("%w: customer id longer than %d bytes", ErrBadEvent, maxStripeID)
	}
	if uuid.Validate(cs.ClientReferenceID) != nil {
		return UnknownCustomer, nil
	}
	tag, err := tx.Exec(ctx, `
		UPDATE accounts SET stripe_customer_id = $2, updated_at = now()
		WHERE id = $1 AND stripe_customer_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM accounts WHERE stripe_customer_id = $2)`,
		cs.ClientReferenceID, cs.Customer.ID)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		var known bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, cs.ClientReferenceID).Scan(&known); err != nil {
			return "", err
		}
		if !known {
			return UnknownCustomer, nil
		}
	}
	return Applied, nil
}
