package privacy

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/list"
)

// HistoryDeleted counts what DeleteHistory removed (DELETE /v1/email/history, docs/api.md).
type HistoryDeleted struct {
	Results    int64 `json:"results"`    // result snapshots in the usage log
	Jobs       int64 `json:"jobs"`       // finished jobs whose email and result were removed
	Deliveries int64 `json:"deliveries"` // finished callbacks of those jobs, whose bodies held the result
	ListRows   int64 `json:"list_rows"`  // rows of finished lists, with the address's result
}

// historyTimeout bounds a history deletion: it reads every row of the account's retained results
// and lists.
const historyTimeout = 5 * time.Minute

// DeleteHistory removes what account stores of one address (compared as list.Normalize does:
// trimmed, any case), in one transaction, for a data-subject request (docs/personal-data.md,
// "One address's results"). Work still running keeps the address until it finishes (a job not
// finished, a list queued or running, a callback still being delivered): removing it from under
// the work would leave it unable to finish. The usage rows stay, without their snapshot: they
// hold the domain and the counts billing needs. A list's counts keep counting the address.
func DeleteHistory(ctx context.Context, db database.DB, account, email string) (HistoryDeleted, error) {
	var d HistoryDeleted
	addr := list.Normalize(email)
	ctx, cancel := withBudget(ctx, historyTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE usage_log SET snapshot = NULL
			WHERE account_id = $1 AND snapshot IS NOT NULL AND lower(trim(snapshot->>'email')) = $2`, account, addr)
		if err != nil {
			return err
		}
		d.Results = tag.RowsAffected()
		rows, err := tx.Query(ctx, `UPDATE jobs SET email = '', result = NULL, webhook_secret = NULL, expired_at = now()
			WHERE account_id = $1 AND lower(trim(email)) = $2 AND state IN ('completed', 'failed') AND expired_at IS NULL
			  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id = jobs.id AND d.state IN ('pending', 'retrying'))
			RETURNING id`, account, addr)
		if err != nil {
			return err
		}
		jobs, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
		if err != nil {
			return err
		}
		d.Jobs = int64(len(jobs))
		if tag, err = tx.Exec(ctx, `DELETE FROM deliveries WHERE account_id = $1 AND job_id = ANY($2)
			AND state IN ('delivered', 'failed')`, account, jobs); err != nil {
			return err
		}
		d.Deliveries = tag.RowsAffected()
		// Finished lists only: a running list counts its verified addresses up to its total, and
		// one taken from under it would never let it complete.
		if tag, err = tx.Exec(ctx, `WITH l AS (
				SELECT id FROM lists WHERE account_id = $1 AND state IN ('completed', 'canceled', 'failed') FOR UPDATE
			), a AS (
				DELETE FROM list_addresses WHERE list_id IN (SELECT id FROM l) AND email = $2
			)
			DELETE FROM list_rows WHERE list_id IN (SELECT id FROM l) AND email = $2`, account, addr); err != nil {
			return err
		}
		d.ListRows = tag.RowsAffected()
		return nil
	})
	return d, err
}
