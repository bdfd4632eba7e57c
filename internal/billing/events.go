package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/audit"
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
	UnknownCustomer Outcome = "unknown_customer" // no account has the subscription's customer (yet)
	// UnknownPrice: the customer's best subscription pays for a price Mailvet does not sell
	// (MAILVET_STRIPE_PRICE_*): the tier is left as it is, and the operator must look.
	UnknownPrice Outcome = "unknown_price"
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

// applySubscription records the subscription's state and then sets the account of its customer
// from the best of the customer's subscriptions (settleCustomer). Events are ordered per
// subscription: a late, older event of a subscription is a no-op, whatever events of the
// customer's other subscriptions came in between (a new subscription after an unpaid one was
// given up, whose cancellation is sent later). Events of the same second apply in arrival order,
// which is the best Stripe's one-second resolution allows, except that a subscription's "created"
// event never undoes a later state of it from the same second. A subscription of a customer no
// account has yet is kept, and applied when a completed Checkout links the customer.
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
	if sub.ID == "" {
		return "", fmt.Errorf("%w: subscription has no id", ErrBadEvent)
	}
	if len(sub.ID) > maxStripeID || len(sub.Customer.ID) > maxStripeID || len(sub.Status) > maxStripeID {
		return "", fmt.Errorf("%w: subscription, customer id or status longer than %d bytes", ErrBadEvent, maxStripeID)
	}
	if err := checkTimes(sub.CurrentPeriodStart, sub.CurrentPeriodEnd, sub.CanceledAt, sub.CancelAt,
		sub.TrialStart, sub.TrialEnd, sub.BillingCycleAnchor); err != nil {
		return "", err
	}
	status := string(sub.Status)
	deleted := e.Type == "customer.subscription.deleted"
	if deleted && status == "" {
		status = "canceled"
	}
	var tier *plan.Tier
	if t, ok := ev.tierOf(&sub); ok {
		tier = &t
	}
	if err := lockCustomer(ctx, tx, sub.Customer.ID); err != nil {
		return "", err
	}
	// The order is decided by the upsert itself, on the subscription row's latest version: events
	// of one customer run one at a time (lockCustomer), but Stripe may send a subscription's
	// events out of order, so an older one that comes second must be a no-op. A "created" event
	// of the same second as a state already applied is the first state, never a later one (a
	// card charged at once makes created/incomplete and updated/active share their second). An
	// ended subscription (deleted, or in one of endedStatuses) is in its last state: an event of
	// the same second that does not end it was sent before the end, and Stripe sends nothing
	// afterwards that would correct a subscription it revived (docs/api.md, "Stripe webhook").
	tag, err := tx.Exec(ctx, `
		INSERT INTO stripe_subscriptions AS s (id, customer_id, status, paying, tier, event_at, object)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET customer_id = $2, status = $3, paying = $4, tier = $5, event_at = $6, object = $7
		WHERE s.event_at < $6 OR (s.event_at = $6 AND NOT $8 AND (s.status <> ALL($10::text[]) OR $9))`,
		sub.ID, sub.Customer.ID, status, !deleted && paying(sub.Status), tier, created, []byte(e.Data.Raw),
		e.Type == "customer.subscription.created", deleted || slices.Contains(endedStatuses, status), endedStatuses)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return Stale, nil
	}
	return ev.settleCustomer(ctx, tx, sub.Customer.ID, created)
}

// settleCustomer sets the tier and the lifecycle fields of the customer's account from the best of
// the customer's subscriptions: one that pays before one that does not, then the higher tier,
// then the newest event. So a customer with two subscriptions (two checkouts completed close
// together, or an old one paid again after a new one was taken) keeps the paid tier while either
// pays, whichever ends first. No paying subscription means the free tier. A paying subscription
// whose price Mailvet does not sell leaves the tier as it is rather than guessing, and says so
// (UnknownPrice), for the operator to map the price. A customer no account has is UnknownCustomer:
// its subscriptions wait for the Checkout that links it.
func (ev *Events) settleCustomer(ctx context.Context, tx pgx.Tx, customerID string, created time.Time) (Outcome, error) {
	var (
		accountID string
		tier      plan.Tier
	)
	err := tx.QueryRow(ctx, `SELECT id, tier FROM accounts WHERE stripe_customer_id = $1 FOR NO KEY UPDATE`,
		customerID).Scan(&accountID, &tier)
	was := tier
	if errors.Is(err, pgx.ErrNoRows) {
		return UnknownCustomer, nil
	}
	if err != nil {
		return "", err
	}
	var (
		raw     []byte
		status  string
		pays    bool
		subTier *plan.Tier
	)
	err = tx.QueryRow(ctx, `SELECT object, status, paying, tier FROM stripe_subscriptions WHERE customer_id = $1
		ORDER BY paying DESC, CASE tier WHEN 'scale' THEN 2 WHEN 'builder' THEN 1 ELSE 0 END DESC, event_at DESC, id
		LIMIT 1`, customerID).Scan(&raw, &status, &pays, &subTier)
	if errors.Is(err, pgx.ErrNoRows) {
		return Applied, nil // a Checkout linked a customer with no subscription yet
	}
	if err != nil {
		return "", err
	}
	var sub stripe.Subscription
	if err := json.Unmarshal(raw, &sub); err != nil {
		return "", fmt.Errorf("stored subscription: %w", err)
	}
	out := Applied
	if !pays {
		// incomplete, incomplete_expired, unpaid, canceled, paused, deleted: no paid tier without payment.
		tier = plan.Free
	} else if t, ok := ev.tierOf(&sub); ok {
		tier = t // by today's price mapping, which an operator may have changed since it was stored
	} else if subTier != nil {
		tier = *subTier // a subscription recorded before this table, whose object carries no price
	} else {
		out = UnknownPrice
	}
	_, err = tx.Exec(ctx, `
		UPDATE accounts SET tier = $2, stripe_subscription_id = $3, subscription_status = $4,
			current_period_start = $5, current_period_end = $6, cancel_at_period_end = $7, canceled_at = $8,
			cancel_at = $9, trial_start = $10, trial_end = $11, billing_cycle_anchor = $12,
			billing_event_at = greatest(billing_event_at, $13), updated_at = now(),
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
	if tier != was {
		// In the event's transaction: a plan change is never applied without its audit event, and
		// an event that cannot be written fails the webhook, which Stripe sends again
		// (docs/security.md, "When an audit write fails").
		if err := audit.Record(ctx, tx, audit.Event{AccountID: accountID, ActorType: audit.ActorSystem, Actor: "stripe",
			Kind: audit.PlanChanged, Outcome: audit.Success,
			Detail: fmt.Sprintf("plan %s → %s (subscription %s %s)", was, tier, sub.ID, status)}); err != nil {
			return "", err
		}
	}
	return out, nil
}

// lockCustomer orders, until tx ends, the events that touch one Stripe customer: a Checkout that
// links the customer to an account, and the customer's subscription events. Without it, the two
// handled at the same moment could each miss the other's uncommitted write (the event finding no
// account, the Checkout no subscription), and a paying customer would stay on free. Row locks
// cannot do this: until the Checkout commits, no account row carries the customer. (The seed 7002
// keeps these keys apart from the list starts' per-account lock, seed 7001.)
func lockCustomer(ctx context.Context, tx pgx.Tx, customerID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7002))`, customerID)
	return err
}

// endedStatuses are the subscription states Stripe never moves out of: a canceled subscription
// (customer.subscription.deleted) and an incomplete one whose first payment window expired.
var endedStatuses = []string{"canceled", "incomplete_expired"}

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
	if err := lockCustomer(ctx, tx, cs.Customer.ID); err != nil {
		return "", err
	}
	tag, err := tx.Exec(ctx, `
		UPDATE accounts SET stripe_customer_id = $2, updated_at = now()
		WHERE id = $1 AND stripe_customer_id IS NULL
		  AND NOT EXISTS (SELECT 1 FROM accounts WHERE stripe_customer_id = $2)`,
		cs.ClientReferenceID, cs.Customer.ID)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 1 {
		// Subscription events that came before this one found no account: apply them now.
		return ev.settleCustomer(ctx, tx, cs.Customer.ID, time.Unix(e.Created, 0).UTC())
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
