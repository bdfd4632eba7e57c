package privacy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/verify/syntax"
)

// HistoryDeleted counts what DeleteHistory removed (DELETE /v1/email/history, docs/api.md).
type HistoryDeleted struct {
	Results    int64 `json:"results"`    // result snapshots in the usage log
	Jobs       int64 `json:"jobs"`       // finished jobs whose email, result, webhook URL and secret were removed
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
// counts keep counting the address. The responses kept for an Idempotency-Key replay that name
// the address go too (idempotency.DeleteSubject).
//
// A deletion that removed anything writes by (who asked; Kind history_deleted) in the same
// transaction, its Detail set here to the counts and never the address, which the audit log
// would otherwise keep after its results are gone (docs/security.md, "Audit log"). One that
// found nothing changed nothing and writes none.
func DeleteHistory(ctx context.Context, db database.DB, account, email string, by audit.Event) (HistoryDeleted, error) {
	return deleteHistory(ctx, db, account, email, false, by)
}

// DeleteSandboxHistory is DeleteHistory asked with a sandbox key: it removes the address from the
// account's sandbox jobs, their callbacks and its sandbox lists only, and leaves the live data
// alone, which a sandbox key never reads nor changes (docs/sandbox.md, "Live and sandbox data are
// kept apart"). Sandbox keys write no usage rows, so there are no result snapshots to remove.
func DeleteSandboxHistory(ctx context.Context, db database.DB, account, email string, by audit.Event) (HistoryDeleted, error) {
	return deleteHistory(ctx, db, account, email, true, by)
}

// deleteHistory is DeleteHistory of every stored result of the account, or, sandboxOnly, of its
// sandbox data only.
func deleteHistory(ctx context.Context, db database.DB, account, email string, sandboxOnly bool, by audit.Event) (HistoryDeleted, error) {
	var d HistoryDeleted
	addrs := addressForms(email)
	from, to := lowering(addrs)
	ctx, cancel := withBudget(ctx, historyTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if !sandboxOnly {
			tag, err := tx.Exec(ctx, `UPDATE usage_log SET snapshot = NULL
				WHERE account_id = $1 AND snapshot IS NOT NULL AND `+normalized(`snapshot->>'email'`)+` = ANY($2)`,
				account, addrs, spaces, from, to)
			if err != nil {
				return err
			}
			d.Results = tag.RowsAffected()
		}
		rows, err := tx.Query(ctx, `UPDATE jobs SET email = '', webhook_url = '', result = NULL, webhook_secret = NULL, expired_at = now()
			WHERE account_id = $1 AND `+normalized(`email`)+` = ANY($2) AND state IN ('completed', 'failed') AND expired_at IS NULL
			  AND (sandbox OR NOT $6)
			  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id = jobs.id AND d.state IN ('pending', 'retrying'))
			RETURNING id`, account, addrs, spaces, from, to, sandboxOnly)
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
		// that log's own retention: their bodies are the result, with the address. They are
		// matched in the database, so that nothing but the count comes back however many
		// expired jobs the account has.
		tag, err := tx.Exec(ctx, `DELETE FROM deliveries d WHERE d.account_id = $1 AND d.state IN ('delivered', 'failed')
			AND (d.job_id = ANY($6) OR CASE
				WHEN EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.job_id AND j.account_id = $1 AND j.expired_at IS NOT NULL
				  AND (j.sandbox OR NOT $7))
				THEN `+normalized(callbackEmail)+` = ANY($2)
				ELSE false END)`, account, addrs, spaces, from, to, jobs, sandboxOnly)
		if err != nil {
			return err
		}
		d.Deliveries = tag.RowsAffected()
		// Finished lists only: a running list counts its verified addresses up to its total, and
		// one taken from under it would never let it complete. A list stores its addresses
		// already normalised (list.Normalize), so they are compared as they are.
		if tag, err = tx.Exec(ctx, `WITH l AS (
				SELECT id FROM lists WHERE account_id = $1 AND state IN ('completed', 'canceled', 'failed') AND (sandbox OR NOT $3)
				FOR UPDATE
			), a AS (
				DELETE FROM list_addresses WHERE list_id IN (SELECT id FROM l) AND email = ANY($2)
			)
			DELETE FROM list_rows WHERE list_id IN (SELECT id FROM l) AND email = ANY($2)`, account, addrs, sandboxOnly); err != nil {
			return err
		}
		d.ListRows = tag.RowsAffected()
		// Responses kept for an Idempotency-Key replay that hold the address's result, whichever
		// route answered them: a retry would otherwise replay it for up to 24 hours. They are not
		// the customer's stored results, so the answer does not count them; the audit event does.
		// A sandbox key's deletion reaches the sandbox's kept responses only, as for its jobs.
		scopes := []string{"", idempotency.ScopeSandbox}
		if sandboxOnly {
			scopes = []string{idempotency.ScopeSandbox}
		}
		replays, err := idempotency.DeleteSubject(ctx, tx, account, scopes, addrs)
		if err != nil {
			return err
		}
		if d == (HistoryDeleted{}) && replays == 0 {
			return nil
		}
		by.Detail = fmt.Sprintf("stored results of one address deleted (results %d, jobs %d, deliveries %d, list rows %d, kept responses %d)",
			d.Results, d.Jobs, d.Deliveries, d.ListRows, replays)
		return audit.Record(ctx, tx, by)
	})
	return d, err
}

// callbackEmail is the SQL for the email field of a job's callback body d.body (bytea). The body
// is the job's result as the verifier encoded it (verdict.Result, whose first field is the
// email), so it starts with {"email":" and, unless the address holds a character JSON escapes
// (a quote, a backslash, & < >), the address follows as it is, up to the next quote. That is
// read without parsing the rest of the body, which keeps small what each of the account's other
// expired callbacks costs (BENCHMARKS.md). Any other body is parsed whole; it is valid JSON that the cast accepts, as the job's result
// was stored as jsonb in the same transaction (job.Finish).
const callbackEmail = `CASE
	WHEN substring(d.body FOR 10) = '\x7b22656d61696c223a22'::bytea
	 AND position('\x22'::bytea IN substring(d.body FROM 11)) > 0
	 AND position('\x5c'::bytea IN substring(d.body FROM 11 FOR position('\x22'::bytea IN substring(d.body FROM 11)))) = 0
	THEN convert_from(substring(d.body FROM 11 FOR position('\x22'::bytea IN substring(d.body FROM 11)) - 1), 'UTF8')
	ELSE convert_from(d.body, 'UTF8')::jsonb->>'email' END`

// normalized is the SQL for list.Normalize of the text expr: trimmed of the characters Go's
// strings.TrimSpace trims ($3, spaces) and lower-cased by translate() from $4 to $5 (lowering).
// Postgres's own lower() folds as the database's LC_CTYPE says, and in a database created with
// the plain C locale it leaves É as it is (docs/personal-data.md, "One address's results");
// translate() and btrim() compare characters, whatever the locale.
func normalized(expr string) string {
	return `translate(btrim(` + expr + `, $3), $4, $5)`
}

// spaces is every character unicode.IsSpace reports, which strings.TrimSpace, and so
// list.Normalize, trims.
var spaces = func() string {
	var b strings.Builder
	for _, r16 := range unicode.White_Space.R16 {
		for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
			if unicode.IsSpace(r) {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}()

// lowering returns translate()'s from and to for comparing stored text with forms, which are
// lower case (list.Normalize): every character that strings.ToLower turns into a character of
// forms, and that character. A stored string lowered this way equals a form exactly when
// strings.ToLower of it does: a character it leaves alone either is already the form's or can
// never be lowered into it. Only the few characters of forms are listed, so that translate(),
// which looks each character up in from, stays cheap.
func lowering(forms []string) (from, to string) {
	var f, t strings.Builder
	seen := map[rune]bool{}
	for _, form := range forms {
		for _, l := range form {
			if seen[l] {
				continue
			}
			seen[l] = true
			for _, u := range upperOf()[l] {
				f.WriteRune(u)
				t.WriteRune(l)
			}
		}
	}
	return f.String(), t.String()
}

// upperOf maps each character to the others that unicode.ToLower (and so strings.ToLower) turns
// into it: É to é, K and the Kelvin sign to k, İ to i. unicode.ToLower changes only the
// characters of unicode.CaseRanges.
var upperOf = sync.OnceValue(func() map[rune][]rune {
	m := map[rune][]rune{}
	for _, cr := range unicode.CaseRanges {
		for r := rune(cr.Lo); r <= rune(cr.Hi); r++ {
			if l := unicode.ToLower(r); l != r {
				m[l] = append(m[l], r)
			}
		}
	}
	return m
})

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
	// the subject may write it the other way. Lowered again, so that every form is one that
	// list.Normalize can give (lowering relies on it).
	for _, f := range forms {
		forms = append(forms, strings.ToLower(norm.NFC.String(f)), strings.ToLower(norm.NFD.String(f)))
	}
	slices.Sort(forms)
	return slices.Compact(forms)
}
