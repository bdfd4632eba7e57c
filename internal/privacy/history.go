package privacy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/verify/syntax"
)

// HistoryDeleted counts what DeleteHistory removed (DELETE /v1/email/history, docs/api.md).
type HistoryDeleted struct {
	Results    int64 `json:"results"`    // result snapshots in the usage log
	Jobs       int64 `json:"jobs"`       // finished jobs whose email and result were removed
	Deliveries int64 `json:"deliveries"` // finished callbacks whose bodies held the address's result
	ListRows   int64 `json:"list_rows"`  // rows of finished lists, with the address's result
}

// historyTimeout bounds a history deletion: it reads every row of the account's retained results
// and lists.
const historyTimeout = 5 * time.Minute

// DeleteHistory removes what account stores of one address (compared as list.Normalize does:
// trimmed, any case, in each of its forms, addressForms), in one transaction, for a data-subject
// request (docs/personal-data.md, "One address's results"). Work still running keeps the address
// until it finishes (a job not finished, a list queued or running, a callback still being
// delivered): removing it from under the work would leave it unable to finish. The usage rows
// stay, without their snapshot: they hold the domain and the counts billing needs. A list's
// counts keep counting the address.
func DeleteHistory(ctx context.Context, db database.DB, account, email string) (HistoryDeleted, error) {
	var d HistoryDeleted
	addrs := addressForms(email)
	ctx, cancel := withBudget(ctx, historyTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE usage_log SET snapshot = NULL
			WHERE account_id = $1 AND snapshot IS NOT NULL AND lower(trim(snapshot->>'email')) = ANY($2)`, account, addrs)
		if err != nil {
			return err
		}
		d.Results = tag.RowsAffected()
		rows, err := tx.Query(ctx, `UPDATE jobs SET email = '', result = NULL, webhook_secret = NULL, expired_at = now()
			WHERE account_id = $1 AND lower(trim(email)) = ANY($2) AND state IN ('completed', 'failed') AND expired_at IS NULL
			  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id = jobs.id AND d.state IN ('pending', 'retrying'))
			RETURNING id`, account, addrs)
		if err != nil {
			return err
		}
		jobs, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
		if err != nil {
			return err
		}
		d.Jobs = int64(len(jobs))
		// A job expired earlier (by retention, or by an earlier request for another form of the
		// address) has no email left to match, but its callbacks stay in the delivery log for
		// that log's own retention: their bodies are the result, with the address.
		earlier, err := expiredCallbacks(ctx, tx, account, addrs)
		if err != nil {
			return err
		}
		if tag, err = tx.Exec(ctx, `DELETE FROM deliveries WHERE account_id = $1 AND (job_id = ANY($2) OR id = ANY($3))
			AND state IN ('delivered', 'failed')`, account, jobs, earlier); err != nil {
			return err
		}
		d.Deliveries = tag.RowsAffected()
		// Finished lists only: a running list counts its verified addresses up to its total, and
		// one taken from under it would never let it complete.
		if tag, err = tx.Exec(ctx, `WITH l AS (
				SELECT id FROM lists WHERE account_id = $1 AND state IN ('completed', 'canceled', 'failed') FOR UPDATE
			), a AS (
				DELETE FROM list_addresses WHERE list_id IN (SELECT id FROM l) AND email = ANY($2)
			)
			DELETE FROM list_rows WHERE list_id IN (SELECT id FROM l) AND email = ANY($2)`, account, addrs); err != nil {
			return err
		}
		d.ListRows = tag.RowsAffected()
		return nil
	})
	return d, err
}

// expiredCallbacks returns the finished callbacks of account's expired jobs whose body's email
// is one of addrs. The bodies are read and compared here rather than in SQL: a body is JSON as
// the verifier wrote it (escapes included), and only its email field is the address.
func expiredCallbacks(ctx context.Context, tx pgx.Tx, account string, addrs []string) ([][16]byte, error) {
	rows, err := tx.Query(ctx, `SELECT d.id, d.body FROM deliveries d JOIN jobs j ON j.id = d.job_id
		WHERE d.account_id = $1 AND j.account_id = $1 AND j.expired_at IS NOT NULL AND d.state IN ('delivered', 'failed')`, account)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids [][16]byte
	for rows.Next() {
		var (
			id   [16]byte
			body []byte
			cb   struct {
				Email string `json:"email"`
			}
		)
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		if json.Unmarshal(body, &cb) == nil && slices.Contains(addrs, list.Normalize(cb.Email)) {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// addressForms returns the forms in which Mailvet may have stored email, each as list.Normalize
// compares it (trimmed, lower case): as given (a job's email, a list's rows), and for an address
// that passes layer 1, as a result names it (docs/api.md, "The verify result": the domain in
// A-labels, the local part in NFC; a result snapshot, a callback body) and with the domain in
// U-labels (a job or a list row sent with an A-label domain names the same mailbox), each of them
// in Unicode's composed (NFC) and decomposed (NFD) forms.
func addressForms(email string) []string {
	forms := []string{list.Normalize(email)}
	if a, err := syntax.Parse(strings.TrimSpace(email)); err == nil {
		forms = append(forms, list.Normalize(a.String()))
		if u, err := idna.Lookup.ToUnicode(a.Domain); err == nil {
			forms = append(forms, list.Normalize(a.Local+"@"+u))
		}
	}
	// A job or a list row keeps the address as it was sent, in whichever Unicode normalisation
	// the sender's keyboard or export made (ü as one code point, or u and a combining diaeresis);
	// the subject may write it the other way.
	for _, f := range forms {
		forms = append(forms, norm.NFC.String(f), norm.NFD.String(f))
	}
	slices.Sort(forms)
	return slices.Compact(forms)
}
