// Package account holds Mailvet's accounts and their API keys, with the Postgres queries behind
// them; the plans whose limits they enforce are package plan's. Every change that checks a limit runs in a transaction that locks the
// account row, so that concurrent requests on any number of API replicas cannot overshoot it.
package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/plan"
)

// Domain errors; internal/api maps each to its HTTP status and error code in one table.
var (
	ErrNotFound               = errors.New("account not found")
	ErrCustomerNotFound       = errors.New("no account has this Stripe customer id")
	ErrKeyNotFound            = errors.New("no active standard key with this id for the account")
	ErrKeyLimitReached        = errors.New("active standard keys are at the plan maximum")
	ErrProvisioningKeyExists  = errors.New("the account already has an active provisioning key; revoke it first")
	ErrKeyAlreadyCreated      = errors.New("a key was already created with this form token")
	ErrCustomerTaken          = errors.New("another account already has this Stripe customer id")
	ErrDatastore              = errors.New("datastore request failed")
	errUniqueViolation        = "23505"
	provisioningUniqueIndex   = "api_keys_one_provisioning"
	stripeCustomerUniqueIndex = "accounts_stripe_customer_id_key"
)

// ErrEmailUnconfirmed: the account was made by a dashboard sign-up whose email was not confirmed
// yet; it gets no keys (docs/dashboard.md, "Email confirmation").
var ErrEmailUnconfirmed = errors.New("the account's email is not confirmed yet")

// datastore wraps a database failure so that callers can map it to datastore_error while the
// log keeps the cause.
func datastore(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrDatastore, op, err)
}

// Account is one row of accounts.
type Account struct {
	ID                   string
	Tier                 plan.Tier
	Email                *string
	StripeCustomerID     *string
	StripeSubscriptionID *string
	SubscriptionStatus   *string
	CurrentPeriodEnd     *time.Time
	CancelAtPeriodEnd    bool
	CanceledAt           *time.Time
	CancelAt             *time.Time
	TrialStart           *time.Time
	TrialEnd             *time.Time
	BillingCycleAnchor   *time.Time
	HardCapEUR           *float64
	CreatedAt            time.Time
}

// Store runs the account queries on a database (a pool, or a transaction another store began).
type Store struct {
	pool database.DB
}

// NewStore returns a Store on db.
func NewStore(db database.DB) *Store { return &Store{pool: db} }

// NewAccount are the fields of a new account.
type NewAccount struct {
	Tier             plan.Tier
	Email            string // empty: none
	StripeCustomerID string // empty: none
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Create inserts an account.
func (s *Store) Create(ctx context.Context, na NewAccount) (Account, error) {
	if _, err := plan.ParseTier(string(na.Tier)); err != nil {
		return Account{}, err
	}
	id := uuid.NewString()
	_, err := s.pool.Exec(ctx, `INSERT INTO accounts (id, tier, email, stripe_customer_id) VALUES ($1, $2, $3, $4)`,
		id, na.Tier, nullable(na.Email), nullable(na.StripeCustomerID))
	if isUnique(err, stripeCustomerUniqueIndex) {
		return Account{}, ErrCustomerTaken
	}
	if err != nil {
		return Account{}, datastore("create account", err)
	}
	return s.Get(ctx, id)
}

const accountColumns = `id, tier, email, stripe_customer_id, stripe_subscription_id, subscription_status,
	current_period_end, cancel_at_period_end, canceled_at, cancel_at, trial_start, trial_end,
	billing_cycle_anchor, hard_cap_eur::float8, created_at`

func scanAccount(row pgx.Row) (Account, error) {
	var a Account
	var tier string
	err := row.Scan(&a.ID, &tier, &a.Email, &a.StripeCustomerID, &a.StripeSubscriptionID, &a.SubscriptionStatus,
		&a.CurrentPeriodEnd, &a.CancelAtPeriodEnd, &a.CanceledAt, &a.CancelAt, &a.TrialStart, &a.TrialEnd,
		&a.BillingCycleAnchor, &a.HardCapEUR, &a.CreatedAt)
	a.Tier = plan.Tier(tier)
	return a, err
}

func (s *Store) getWhere(ctx context.Context, where string, arg any, notFound error) (Account, error) {
	// A deleted account's tombstone (docs/personal-data.md, "Deleting an account") is found by
	// nothing that serves a customer.
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE deleted_at IS NULL AND `+where, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, notFound
	}
	if err != nil {
		return Account{}, datastore("read account", err)
	}
	return a, nil
}

// Get returns the account id, or ErrNotFound (also for an id that is not a UUID).
func (s *Store) Get(ctx context.Context, id string) (Account, error) {
	if uuid.Validate(id) != nil {
		return Account{}, ErrNotFound
	}
	return s.getWhere(ctx, `id = $1`, id, ErrNotFound)
}

// ByCustomer returns the account of a Stripe customer, or ErrCustomerNotFound.
func (s *Store) ByCustomer(ctx context.Context, customerID string) (Account, error) {
	return s.getWhere(ctx, `stripe_customer_id = $1`, customerID, ErrCustomerNotFound)
}

// ByEmail returns the oldest account with this email, or ErrNotFound.
func (s *Store) ByEmail(ctx context.Context, email string) (Account, error) {
	return s.getWhere(ctx, `email = $1 ORDER BY created_at, id LIMIT 1`, email, ErrNotFound)
}

// SetTier changes an account's tier by hand (the dashboard's and the admin command's override).
func (s *Store) SetTier(ctx context.Context, id string, tier plan.Tier) error {
	if _, err := plan.ParseTier(string(tier)); err != nil {
		return err
	}
	return s.update(ctx, id, `tier = $2`, tier)
}

// LinkCustomer records the Stripe customer of an account that has none yet (Stripe Checkout
// from the dashboard creates it, docs/dashboard.md). Linking the customer already linked is a
// no-op; an account linked to a different customer keeps it (ErrCustomerTaken), and so does a
// customer already linked to another account.
func (s *Store) LinkCustomer(ctx context.Context, id, customerID string) error {
	if uuid.Validate(id) != nil {
		return ErrNotFound
	}
	if customerID == "" {
		return errors.New("empty Stripe customer id")
	}
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET stripe_customer_id = $2, updated_at = now()
		WHERE id = $1 AND (stripe_customer_id IS NULL OR stripe_customer_id = $2)`, id, customerID)
	if isUnique(err, stripeCustomerUniqueIndex) {
		return ErrCustomerTaken
	}
	if err != nil {
		return datastore("link customer", err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.Get(ctx, id); err != nil {
			return err
		}
		return ErrCustomerTaken
	}
	return nil
}

// SetSpendCap sets the hard EUR spend cap per billing period; nil removes it.
func (s *Store) SetSpendCap(ctx context.Context, id string, eur *float64) error {
	// Written as a negated range so that NaN, which every comparison fails, is refused too.
	if eur != nil && !(*eur >= 0 && *eur <= 1e9) {
		return fmt.Errorf("spend cap %v EUR is out of range (0 to 1e9)", *eur)
	}
	return s.update(ctx, id, `hard_cap_eur = $2`, eur)
}

// ConfirmEmail marks the account's email confirmed by hand, as opening the link mailed at
// sign-up does (docs/dashboard.md, "Email confirmation"; docs/operations.md, "bin/api admin"), and
// reports whether it was unconfirmed: false means it already was confirmed and nothing changed.
// ErrNotFound for no such account. Run in a transaction (InTx), the row stays locked until the
// change's audit event is written with it.
func (s *Store) ConfirmEmail(ctx context.Context, id string) (changed bool, err error) {
	if uuid.Validate(id) != nil {
		return false, ErrNotFound
	}
	var unconfirmed bool
	err = s.pool.QueryRow(ctx, `SELECT email_unconfirmed FROM accounts WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE`, id).Scan(&unconfirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ErrNotFound
	}
	if err != nil {
		return false, datastore("read account", err)
	}
	if !unconfirmed {
		return false, nil
	}
	if _, err := s.pool.Exec(ctx, `UPDATE accounts SET email_unconfirmed = false, updated_at = now() WHERE id = $1`, id); err != nil {
		return false, datastore("confirm email", err)
	}
	return true, nil
}

func (s *Store) update(ctx context.Context, id, set string, arg any) error {
	if uuid.Validate(id) != nil {
		return ErrNotFound
	}
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET `+set+`, updated_at = now() WHERE id = $1`, id, arg)
	if err != nil {
		return datastore("update account", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

func isUnique(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == errUniqueViolation && pe.ConstraintName == constraint
}

// CheckoutWindow is how long a Checkout session opened for an upgrade takes payment (its
// expires_at at Stripe, which allows no less than 30 minutes).
const CheckoutWindow = 30 * time.Minute

// OpenCheckout is a Checkout session an upgrade of the account opened and that can still be paid.
type OpenCheckout struct {
	URL       string
	Tier      plan.Tier
	ExpiresAt time.Time
}

// checkoutClaim is how long an upgrade may take to open its Checkout session (its Stripe call)
// before another upgrade of the account may open one instead.
const checkoutClaim = 15 * time.Second

// ErrCheckoutPending is Checkout's answer when another upgrade of the account was still opening
// its session after checkoutClaim: it can be tried again in a moment.
var ErrCheckoutPending = errors.New("another upgrade of the account is still opening its Checkout session")

// Checkout returns the account's open Checkout session, or runs open to start one and records it
// (docs/dashboard.md, "How an upgrade works"). A session completes once, so sending every upgrade of the
// account to the one open session, instead of opening another, keeps a double click, a second tab
// or the return page before Stripe's webhook from starting a second subscription. reused reports
// an open session found; open is not run then.
//
// The upgrade that opens the session claims the account for checkoutClaim first, in a short
// transaction, and runs open outside any: holding the account's row lock across the Stripe call
// would block the account's other writes (keys, spend cap, Stripe's own webhooks) for as long as
// Stripe takes. An upgrade that finds the claim taken waits for the session it brings, so two
// upgrades at once still open one session.
func (s *Store) Checkout(ctx context.Context, id string, now time.Time, open func(expires time.Time) (url string, tier plan.Tier, err error)) (co OpenCheckout, reused bool, err error) {
	if uuid.Validate(id) != nil {
		return co, false, ErrNotFound
	}
	waitUntil := time.Now().Add(checkoutClaim)
	for {
		var claimed bool
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var (
				url, tier      *string
				expires, claim *time.Time
			)
			err := tx.QueryRow(ctx, `SELECT checkout_url, checkout_tier, checkout_expires_at, checkout_claimed_until
				FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&url, &tier, &expires, &claim)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			// A minute's margin: a session about to expire is not handed out to be paid in time.
			if url != nil && tier != nil && expires != nil && expires.After(now.Add(time.Minute)) {
				co, reused = OpenCheckout{URL: *url, Tier: plan.Tier(*tier), ExpiresAt: *expires}, true
				return nil
			}
			if claim != nil && claim.After(now) {
				return nil // another upgrade is opening the session: wait for it
			}
			claimed = true
			_, err = tx.Exec(ctx, `UPDATE accounts SET checkout_claimed_until = $2 WHERE id = $1`, id, now.Add(checkoutClaim))
			return err
		})
		switch {
		case err != nil || reused:
			return co, reused, err
		case claimed:
			return s.openCheckout(ctx, id, now, open)
		case !time.Now().Before(waitUntil):
			return co, false, ErrCheckoutPending
		}
		select {
		case <-ctx.Done():
			return co, false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// openCheckout runs open for the upgrade that holds the account's claim, records the session it
// opened, and gives the claim up, also when open failed, so that the next upgrade can try again.
func (s *Store) openCheckout(ctx context.Context, id string, now time.Time, open func(expires time.Time) (string, plan.Tier, error)) (OpenCheckout, bool, error) {
	exp := now.Add(CheckoutWindow)
	u, t, err := open(exp)
	done := context.WithoutCancel(ctx) // the claim is given up even if the caller has gone
	if err != nil {
		_, _ = s.pool.Exec(done, `UPDATE accounts SET checkout_claimed_until = NULL WHERE id = $1`, id)
		return OpenCheckout{}, false, err
	}
	_, err = s.pool.Exec(done, `UPDATE accounts SET checkout_url = $2, checkout_tier = $3, checkout_expires_at = $4,
		checkout_claimed_until = NULL, updated_at = now() WHERE id = $1`, id, u, string(t), exp)
	if err != nil {
		return OpenCheckout{}, false, err
	}
	return OpenCheckout{URL: u, Tier: t, ExpiresAt: exp}, false, nil
}
