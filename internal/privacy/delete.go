package privacy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
)

// ErrNotFound: no account with that id, or it was deleted already.
var ErrNotFound = errors.New("account not found")

// ErrSubscriptionActive: the account pays for a Stripe subscription, which must be canceled (and
// have ended) before the account is deleted, or Stripe would go on charging for an account that
// no longer exists (docs/personal-data.md, "Deleting an account").
var ErrSubscriptionActive = errors.New("account has an active subscription")

// deleteTimeout bounds an account's deletion: its lists can hold millions of rows.
const deleteTimeout = 10 * time.Minute

// DeleteAccount deletes account id and everything stored for it, in one transaction
// (docs/personal-data.md, "Deleting an account"): its keys (revoked the moment it commits), its
// dashboard user and sessions, lists with their rows and results, jobs, deliveries, usage rows,
// idempotency records, upload tokens and rate windows. What stays is the account's row as an
// anonymous tombstone (deleted_at set; no email) with its monthly and daily billing counts.
//
// Work in flight for the account (a queued job, a list chunk, a request being answered) finds
// its job, list or usage hold gone and writes nothing (job.Finish, list's Write and usage.Bill
// skip what no longer exists); what a request admitted in the same instant still writes is
// removed by the retention loop's SweepDeleted.
func DeleteAccount(ctx context.Context, db database.DB, id string) error {
	if uuid.Validate(id) != nil {
		return ErrNotFound
	}
	ctx, cancel := withBudget(ctx, deleteTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			email   *string
			deleted *time.Time
			paying  bool
		)
		// FOR NO KEY UPDATE, not FOR UPDATE: the row stays, and the foreign-key checks of work in
		// flight (KEY SHARE) must not wait on this transaction while it waits on them.
		err := tx.QueryRow(ctx, `SELECT email, deleted_at,
				coalesce(subscription_status IN ('active', 'trialing', 'past_due'), false)
			FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&email, &deleted, &paying)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case deleted != nil:
			return ErrNotFound
		case paying:
			return ErrSubscriptionActive
		}
		// The sign-in throttle counts failures per hashed email (internal/dashboard, throttle.go).
		var subjects []string
		rows, err := tx.Query(ctx, `SELECT email FROM dashboard_users WHERE account_id = $1`, id)
		if err != nil {
			return err
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if email != nil {
			users = append(users, *email)
		}
		for _, u := range users {
			s := sha256.Sum256([]byte(strings.ToLower(u)))
			subjects = append(subjects, "account:"+hex.EncodeToString(s[:]))
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject = ANY($1)`, subjects); err != nil {
			return fmt.Errorf("delete account %s: sign-in failures: %w", id, err)
		}
		if _, err := erase(ctx, tx, id); err != nil {
			return err
		}
		// Holds are gone with the account's work: nothing is held for it any more.
		if _, err := tx.Exec(ctx, `UPDATE usage_monthly SET held = 0 WHERE account_id = $1 AND held <> 0`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE accounts SET email = NULL, checkout_url = NULL, checkout_tier = NULL,
			checkout_expires_at = NULL, checkout_claimed_until = NULL, hard_cap_eur = NULL,
			deleted_at = now(), updated_at = now() WHERE id = $1`, id)
		return err
	})
}

// erase deletes every row of account id except its tombstone and billing counts, and returns
// how many. Lists first: their rows have no foreign key (a million-row COPY would check each),
// so they go by the lists' ids, as list.Delete does.
func erase(ctx context.Context, tx pgx.Tx, id string) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM lists WHERE account_id = $1 FOR UPDATE`, id)
	if err != nil {
		return 0, err
	}
	lists, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	var n int64
	for _, q := range []struct {
		sql, what string
		arg       any
	}{
		{`DELETE FROM list_rows WHERE list_id = ANY($1)`, "list rows", lists},
		{`DELETE FROM list_addresses WHERE list_id = ANY($1)`, "list results", lists},
		{`DELETE FROM list_counts WHERE list_id = ANY($1)`, "list counts", lists},
		{`DELETE FROM lists WHERE account_id = $1`, "lists", id},
		{`DELETE FROM deliveries WHERE account_id = $1`, "deliveries", id},
		{`DELETE FROM jobs WHERE account_id = $1`, "jobs", id},
		{`DELETE FROM usage_holds WHERE account_id = $1`, "usage holds", id},
		{`DELETE FROM usage_log WHERE account_id = $1`, "usage rows", id},
		{`DELETE FROM idempotency_keys WHERE account_id = $1`, "idempotency records", id},
		{`DELETE FROM dashboard_upload_tokens WHERE account_id = $1`, "upload tokens", id},
		{`DELETE FROM rate_windows WHERE account_id = $1`, "rate windows", id},
		{`DELETE FROM api_keys WHERE account_id = $1`, "keys", id},
		{`DELETE FROM dashboard_users WHERE account_id = $1`, "dashboard users", id},
	} {
		tag, err := tx.Exec(ctx, q.sql, q.arg)
		if err != nil {
			return n, fmt.Errorf("delete account %s: %s: %w", id, q.what, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// withBudget gives ctx d unless it has a deadline already.
func withBudget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// sweepWindow is how long after an account's deletion SweepDeleted looks at it again: longer
// than any work admitted before the deletion can run (a request, a list upload).
const sweepWindow = 24 * time.Hour

// SweepDeleted deletes what work in flight at an account's deletion wrote after it (a usage
// row of a request admitted in the same instant, a job or list its request stored meanwhile),
// for the accounts deleted in the last day, and returns how many rows. Each account is its own
// transaction that skips an account another replica is sweeping.
func SweepDeleted(ctx context.Context, db database.DB, now time.Time) (int64, error) {
	qctx, cancel := context.WithTimeout(ctx, batchTimeout)
	rows, err := db.Query(qctx, `SELECT id::text FROM accounts WHERE deleted_at > $1 ORDER BY deleted_at LIMIT 1000`,
		now.Add(-sweepWindow))
	var ids []string
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	cancel()
	if err != nil {
		return 0, fmt.Errorf("sweep deleted accounts: %w", err)
	}
	var total int64
	for _, id := range ids {
		tctx, cancel := context.WithTimeout(ctx, batchTimeout)
		err := pgx.BeginFunc(tctx, db, func(tx pgx.Tx) error {
			var got string
			err := tx.QueryRow(tctx, `SELECT id::text FROM accounts WHERE id = $1 AND deleted_at IS NOT NULL
				FOR NO KEY UPDATE SKIP LOCKED`, id).Scan(&got)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // another replica sweeps it now
			}
			if err != nil {
				return err
			}
			n, err := erase(tctx, tx, id)
			total += n
			return err
		})
		cancel()
		if err != nil {
			return total, fmt.Errorf("sweep deleted account %s: %w", id, err)
		}
	}
	return total, nil
}
