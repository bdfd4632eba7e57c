package privacy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/database"
)

// ErrNotFound: no account with that id, or it was deleted already.
var ErrNotFound = errors.New("account not found")

// ErrSubscriptionActive: the account pays for a Stripe subscription, which must be canceled (and
// have ended) before the account is deleted, or Stripe would go on charging for an account that
// no longer exists (docs/personal-data.md, "Deleting an account").
var ErrSubscriptionActive = errors.New("account has an active subscription")

// deleteTimeout bounds the first step of a deletion, the small rows and the tombstone.
const deleteTimeout = 30 * time.Second

// DeleteAccount deletes account id and everything stored for it (docs/personal-data.md,
// "Deleting an account"), in two steps.
//
// The first is one transaction: work still running is stopped (unfinished jobs deleted,
// unfinished lists canceled), the keys revoked (the moment it commits) and their labels
// cleared, the dashboard user and sessions, the sign-in throttle's counters of its email,
// idempotency records, upload tokens, rate windows and usage holds are deleted, and the
// account's row becomes an anonymous tombstone (deleted_at set; no email) that keeps its monthly
// and daily billing counts. From then on the account is gone for every customer-facing path.
//
// The second, Erase, deletes what can be large (lists with their rows, jobs, deliveries, usage
// rows) in bounded batches, then the keys, and marks the tombstone erased_at when nothing is
// left. DeleteAccount runs it before it returns; if it is cut short (a timeout, a crash), the
// retention loop's SweepDeleted finishes it. An error of that step is not DeleteAccount's: the account is deleted.
//
// Work in flight for the account (a queued job, a list chunk, a request being answered) finds
// its job, list or usage hold gone and writes nothing (job.Finish, list's Write and usage.Bill
// skip what no longer exists); what a request admitted in the same instant still writes,
// SweepDeleted removes for a day after the deletion.
//
// by is the deletion's audit event (docs/security.md, "Audit log"): the account's earlier events
// go with its personal data (they name its users and client addresses), and this one, written in
// the same transaction, is what stays, with the account's id and no email.
func DeleteAccount(ctx context.Context, db database.DB, id string, by audit.Event) error {
	if uuid.Validate(id) != nil {
		return ErrNotFound
	}
	tctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	var err error
	for attempt := 1; ; attempt++ {
		err = deleteOnce(tctx, db, id, by)
		var pgErr *pgconn.PgError
		// eraseSmall locks in the order the account's work does; should some path still meet
		// the deletion in a circle, Postgres ends one of the two, and nothing of this one was
		// committed: it runs again.
		if attempt < deleteAttempts && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			continue
		}
		break
	}
	if err != nil {
		return err
	}
	// An error here is not the deletion's: the account is deleted, and SweepDeleted finishes it.
	if _, done, err := Erase(ctx, db, id, -1); err == nil && done {
		_, _ = db.Exec(ctx, markErasedSQL, id)
	}
	return nil
}

// deleteAttempts bounds how often the deletion's transaction runs after a deadlock. A variable
// so that a test can see a deadlock the retry would otherwise hide.
var deleteAttempts = 3

// deleteOnce is the first step of DeleteAccount, one transaction.
func deleteOnce(tctx context.Context, db database.DB, id string, by audit.Event) error {
	return pgx.BeginFunc(tctx, db, func(tx pgx.Tx) error {
		var (
			email   *string
			deleted *time.Time
			paying  bool
		)
		// FOR NO KEY UPDATE, not FOR UPDATE: the row stays, and the foreign-key checks of work in
		// flight (KEY SHARE) must not wait on this transaction while it waits on them.
		err := tx.QueryRow(tctx, `SELECT email, deleted_at,
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
		// The sign-in throttle counts failures per hashed folded email (internal/dashboard,
		// throttle.go; account.FoldEmail).
		rows, err := tx.Query(tctx, `SELECT email FROM dashboard_users WHERE account_id = $1`, id)
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
		var subjects []string
		for _, u := range users {
			s := sha256.Sum256([]byte(account.FoldEmail(u)))
			subjects = append(subjects, "account:"+hex.EncodeToString(s[:]))
		}
		if _, err := tx.Exec(tctx, `DELETE FROM dashboard_signin_failures WHERE subject = ANY($1)`, subjects); err != nil {
			return fmt.Errorf("delete account %s: sign-in failures: %w", id, err)
		}
		if _, err := eraseSmall(tctx, tx, id); err != nil {
			return err
		}
		// Holds are gone with the account's work: nothing is held for it any more.
		if _, err := tx.Exec(tctx, `UPDATE usage_monthly SET held = 0 WHERE account_id = $1 AND held <> 0`, id); err != nil {
			return err
		}
		_, err = tx.Exec(tctx, `UPDATE accounts SET email = NULL, checkout_url = NULL, checkout_tier = NULL,
			checkout_expires_at = NULL, checkout_claimed_until = NULL, hard_cap_eur = NULL,
			deleted_at = now(), erased_at = NULL, updated_at = now() WHERE id = $1`, id)
		if err != nil {
			return err
		}
		// Once, here, not in eraseSmall, which the sweep repeats: the event below must stay.
		if _, err := tx.Exec(tctx, `DELETE FROM audit_events WHERE account_id = $1`, id); err != nil {
			return fmt.Errorf("delete account %s: audit events: %w", id, err)
		}
		by.AccountID, by.Kind, by.Outcome = id, audit.AccountDeleted, audit.Success
		return audit.Record(tctx, tx, by)
	})
}

// eraseSmall deletes the rows of account id that are few (work still running, a user, keys,
// records of the last day): one statement each, in the caller's transaction. Work still running
// goes first, so that a worker's message taken after the commit finds nothing to do: unfinished
// jobs are deleted (with their callbacks), unfinished lists canceled (their rows go with Erase),
// and the callbacks of finished jobs and lists not sent yet deleted.
//
// The order is the order in which the account's own work locks the same rows, so that the
// deletion never waits for a request or a worker that waits for it: rate windows before
// anything of metering (an admission takes its rate window, then the month's row); jobs, then
// lists, then callbacks, then holds (a worker finishing a job or a chunk locks it, bills it and
// writes its callback, a new row no statement here waits for); holds in id
// order, then keys (the bill statement locks its holds by id, then its usage rows' foreign keys
// take the keys); the month's held count after all of them (DeleteAccount).
func eraseSmall(ctx context.Context, tx pgx.Tx, id string) (int64, error) {
	var n int64
	for _, q := range []struct{ sql, what string }{
		{`DELETE FROM rate_windows WHERE account_id = $1`, "rate windows"},
		{`DELETE FROM sandbox_rate_windows WHERE account_id = $1`, "sandbox rate windows"},
		{`DELETE FROM jobs WHERE account_id = $1 AND state IN ('pending', 'processing', 'retrying')`, "unfinished jobs"},
		{`UPDATE lists SET state = 'canceled', finished_at = now(), updated_at = now()
			WHERE account_id = $1 AND state IN ('queued', 'running')`, "unfinished lists"},
		// The callbacks of finished work still to be sent carry its results (addresses): they
		// stop here, not when Erase reaches the deliveries, which a large list's erasure ahead of
		// them (or a deletion cut short) can put minutes away. A webhook worker's message then
		// finds no delivery and is acked.
		{`DELETE FROM deliveries WHERE account_id = $1 AND state IN ('pending', 'retrying')`, "callbacks not sent"},
		{`DELETE FROM usage_holds WHERE id IN (
			SELECT id FROM usage_holds WHERE account_id = $1 ORDER BY id FOR UPDATE)`, "usage holds"},
		// Revoked, not deleted: deleting a key sets key_id to NULL on every usage row, job and
		// list it made, which for a large account is Erase's work, in batches. A revoked key
		// answers 401 from the commit on; its label (the customer's words) goes in this step,
		// its row at the end of Erase. An UPDATE that leaves the key columns alone does not wait
		// for, nor block, the foreign-key checks of the account's bills in flight.
		{`UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()), label = ''
			WHERE account_id = $1 AND (revoked_at IS NULL OR label <> '')`, "keys"},
		{`DELETE FROM dashboard_users WHERE account_id = $1`, "dashboard users"}, // and, by cascade, sessions
		{`DELETE FROM idempotency_keys WHERE account_id = $1`, "idempotency records"},
		{`DELETE FROM dashboard_upload_tokens WHERE account_id = $1`, "upload tokens"},
	} {
		tag, err := tx.Exec(ctx, q.sql, id)
		if err != nil {
			return n, fmt.Errorf("delete account %s: %s: %w", id, q.what, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// eraseBatch is how many rows one statement of Erase deletes.
const eraseBatch = 5000

// Erase deletes the large part of a deleted account (docs/personal-data.md, "Deleting an
// account"): each list with its rows, addresses and counts in a transaction of its own (as
// list.Delete does: the rows have no foreign key), then its deliveries, jobs and usage rows in
// batches of eraseBatch, each batch one statement, and the small rows again (work in flight may
// have written some). At most maxBatches batches of each table run (negative: no limit). done
// is true when nothing is left (the caller then marks the tombstone erased_at, markErasedSQL).
// It returns the rows it deleted. Only a tombstone is erased: an account that is not deleted is
// left alone.
func Erase(ctx context.Context, db database.DB, id string, maxBatches int) (n int64, done bool, err error) {
	var deleted bool
	if err := db.QueryRow(ctx, `SELECT deleted_at IS NOT NULL FROM accounts WHERE id = $1`, id).Scan(&deleted); err != nil || !deleted {
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return 0, false, err
	}
	done = true
	// Lists, one transaction each.
	for b := 0; maxBatches < 0 || b < maxBatches; b++ {
		var list uuid.UUID
		err := db.QueryRow(ctx, `SELECT id FROM lists WHERE account_id = $1 LIMIT 1`, id).Scan(&list)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			return n, false, err
		}
		m, err := eraseList(ctx, db, list)
		n += m
		if err != nil {
			return n, false, err
		}
		if maxBatches >= 0 && b == maxBatches-1 {
			done = false
		}
	}
	for _, q := range []struct{ sql, what string }{
		{`DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE account_id = $1 LIMIT $2)`, "deliveries"},
		{`DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE account_id = $1 LIMIT $2)`, "jobs"},
		{`DELETE FROM usage_log WHERE id IN (SELECT id FROM usage_log WHERE account_id = $1 LIMIT $2)`, "usage rows"},
	} {
		m, err := batches(ctx, maxBatches, eraseBatch, func(ctx context.Context) (int64, error) {
			tag, err := db.Exec(ctx, q.sql, id, eraseBatch)
			return tag.RowsAffected(), err
		})
		n += m
		if err != nil {
			return n, false, fmt.Errorf("erase account %s: %s: %w", id, q.what, err)
		}
		if maxBatches >= 0 && m >= int64(maxBatches)*eraseBatch {
			done = false // maybe more left
		}
	}
	sctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	err = pgx.BeginFunc(sctx, db, func(tx pgx.Tx) error {
		m, err := eraseSmall(sctx, tx, id)
		n += m
		if err != nil || !done {
			return err
		}
		// Erase is done: no row the keys made is left, so deleting them sets nothing to NULL.
		tag, err := tx.Exec(sctx, `DELETE FROM api_keys WHERE account_id = $1`, id)
		n += tag.RowsAffected()
		return err
	})
	return n, done && err == nil, err
}

// markErasedSQL records that Erase left nothing of a deleted account; the caller runs it once
// Erase reports done (SweepDeleted in the transaction that holds the tombstone's lock).
const markErasedSQL = `UPDATE accounts SET erased_at = now() WHERE id = $1 AND erased_at IS NULL`

// eraseList deletes a list and everything stored for it in one transaction, as list.Delete
// does; a chunk being written meanwhile waits for the list's lock and then finds it gone.
func eraseList(ctx context.Context, db database.DB, list uuid.UUID) (int64, error) {
	ctx, cancel := withBudget(ctx, listTimeout)
	defer cancel()
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM lists WHERE id = $1 FOR UPDATE`, list); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM list_rows WHERE list_id = $1`,
			`DELETE FROM list_addresses WHERE list_id = $1`,
			`DELETE FROM list_counts WHERE list_id = $1`,
			`DELETE FROM lists WHERE id = $1`, // and, by cascade, its deliveries
		} {
			tag, err := tx.Exec(ctx, q, list)
			if err != nil {
				return fmt.Errorf("erase list %s: %w", list, err)
			}
			n += tag.RowsAffected()
		}
		return nil
	})
	return n, err
}

// listTimeout bounds the deletion of one list: a list can hold millions of rows (list.Delete
// has the same budget).
const listTimeout = 15 * time.Minute

// withBudget gives ctx d unless it has a deadline already.
func withBudget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// sweepWindow is how long after an account's deletion SweepDeleted looks at it again although
// it was erased: longer than any work admitted before the deletion can run (a request, a list
// upload).
const sweepWindow = 24 * time.Hour

// SweepDeleted erases the deleted accounts that are not erased yet (a deletion cut short), and
// those deleted in the last day again, for what work in flight at the deletion wrote after it (a
// usage row of a request admitted in the same instant, a job or list its request stored
// meanwhile). It returns the rows it deleted. An account is swept by one replica at a time: the
// replica holds the tombstone's row lock while it erases, and the others skip it.
func SweepDeleted(ctx context.Context, db database.DB, now time.Time) (int64, error) {
	qctx, cancel := context.WithTimeout(ctx, batchTimeout)
	rows, err := db.Query(qctx, `SELECT id::text FROM accounts
		WHERE deleted_at IS NOT NULL AND (erased_at IS NULL OR deleted_at > $1)
		ORDER BY deleted_at LIMIT 100`, now.Add(-sweepWindow))
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
		n, err := sweepOne(ctx, db, id)
		total += n
		if err != nil {
			return total, fmt.Errorf("sweep deleted account %s: %w", id, err)
		}
	}
	return total, nil
}

// sweepOne erases one deleted account unless another replica is at it, at most 100 batches of
// each table, so that one run stays bounded; the next run goes on.
func sweepOne(ctx context.Context, db database.DB, id string) (int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	var got string
	err = tx.QueryRow(ctx, `SELECT id::text FROM accounts WHERE id = $1 AND deleted_at IS NOT NULL
		FOR NO KEY UPDATE SKIP LOCKED`, id).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil // another replica sweeps it now
	}
	if err != nil {
		return 0, err
	}
	n, done, err := Erase(ctx, db, id, 100)
	if err != nil {
		return n, err
	}
	if done {
		if _, err := tx.Exec(ctx, markErasedSQL, id); err != nil {
			return n, err
		}
	}
	return n, tx.Commit(ctx)
}
