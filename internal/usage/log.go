package usage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Row is one usage-log row: a verified email, or a request that was rejected.
type Row struct {
	// ItemKey makes logging idempotent: a retried or redelivered item with the same key is
	// logged, and counted, once. Use the request id plus the item's index, or "job:"+job id.
	ItemKey     string
	AccountID   string
	KeyID       string // empty when not known
	OccurredAt  time.Time
	Route       string
	EmailDomain string
	Status      string
	FailedCheck string
	// ErrorClass is null for successful verifications and otherwise the response's error code
	// (rate_limit for rate_limit_exceeded; docs/errors.md).
	ErrorClass string
	// Billable: the email passed layer 1 (docs/api.md, "Metering").
	Billable bool
	// QuotaUnit: the email entered verification (the free-tier monthly quota; docs/api.md, "Metering").
	QuotaUnit bool
	Snapshot  []byte // JSON; nil for none
	// heldBy is the API replica that holds the row until its result is delivered (Holds); empty
	// for a row that is owed at once. Only a Ledger with Holds sets it.
	heldBy string
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullableJSON is a jsonb argument: nil (SQL null) for no document.
func nullableJSON(doc []byte) *string {
	if doc == nil {
		return nil
	}
	return nullable(string(doc))
}

// logColumnNames are the usage_log columns Record and Admit write, in logColumns' order.
const logColumnNames = `account_id, key_id, item_key, occurred_at, route, email_domain, status,
	failed_check, error_class, billable, quota_unit, snapshot, held_by`

// unnestParams is the unnest argument list of logColumns' arrays, numbered from $first.
func unnestParams(first int) string {
	types := []string{"uuid", "uuid", "text", "timestamptz", "text", "text", "text", "text", "text", "bool", "bool", "jsonb", "uuid"}
	var b strings.Builder
	for i, t := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d::%s[]", first+i, t)
	}
	return b.String()
}

// logColumns turns rows into one array per column, for unnest: one statement writes any number
// of rows.
func logColumns(rows []Row) []any {
	n := len(rows)
	var (
		accounts, items, routes                  = make([]string, n), make([]string, n), make([]string, n)
		keys, domains, statuses, checks, classes = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		snaps, held                              = make([]*string, n), make([]*string, n)
		times                                    = make([]time.Time, n)
		billable, quotaBit                       = make([]bool, n), make([]bool, n)
	)
	for i, r := range rows {
		accounts[i], items[i], routes[i] = r.AccountID, r.ItemKey, r.Route
		keys[i], domains[i], statuses[i] = nullable(r.KeyID), nullable(r.EmailDomain), nullable(r.Status)
		checks[i], classes[i] = nullable(r.FailedCheck), nullable(r.ErrorClass)
		snaps[i], held[i] = nullableJSON(r.Snapshot), nullable(r.heldBy)
		times[i] = r.OccurredAt
		if times[i].IsZero() {
			times[i] = time.Now()
		}
		billable[i], quotaBit[i] = r.Billable, r.QuotaUnit
	}
	return []any{accounts, keys, items, times, routes, domains, statuses, checks, classes, billable, quotaBit, snaps, held}
}

// recordSQL logs rows ($1–$13), skipping item keys already logged, and adds the billable ones it
// logged to the daily and monthly counters. Every statement that changes the counters locks them
// in one order, usage_monthly first, then usage_daily: the admission statement (admitSQL), whose
// month step is read by its main query and whose daily step is not, withdraw, and this one.
// Postgres runs a data-modifying CTE that nothing reads after the main statement, so the monthly
// insert is the main statement here and the daily one such a CTE. In opposite orders two metering
// statements of one account deadlock (a stream's Record and a single verification's admission
// did), and each deadlock held every metering statement of the account for deadlock_timeout
// (1 s), past their deadline (docs/reliability.md, "Cluster fault test").
var recordSQL = recordStatement(false)

// recordReservedSQL is recordSQL for the rows of a request with a reservation under the spend
// cap ($14, see Request.Reservation): the rows it logs are taken off the reservation, and off the
// month's reserved count, in the same statement, so that no email is ever counted both as
// reserved and as billed, nor as neither. A reservation already released (the request ended, or
// the sweep took its replica for dead) takes nothing off.
var recordReservedSQL = recordStatement(true)

func recordStatement(reserved bool) string {
	monthly := `
			INSERT INTO usage_monthly AS m (account_id, month, billable)
			SELECT account_id, date_trunc('month', at)::date, count(*) FROM ins WHERE billable GROUP BY 1, 2
			ON CONFLICT (account_id, month) DO UPDATE SET billable = m.billable + EXCLUDED.billable`
	release := ""
	if reserved {
		// One statement may change a usage_monthly row only once, so the billable rows and the
		// released emails of each month are summed first. The reservation's month row exists
		// (admission wrote it); EXCLUDED.reserved carries the emails to take off.
		release = `, rel AS (
			UPDATE usage_reservations v SET emails = greatest(0, v.emails - x.n)
			FROM (SELECT id, least(emails, (SELECT count(*) FROM ins)::int) AS n
				FROM usage_reservations WHERE id = $14::uuid) x
			WHERE v.id = x.id AND x.n > 0
			RETURNING v.account_id, v.month, x.n
		)`
		monthly = `
			INSERT INTO usage_monthly AS m (account_id, month, billable, reserved)
			SELECT account_id, month, sum(b)::int, sum(n)::int FROM (
				SELECT account_id, date_trunc('month', at)::date AS month, count(*) FILTER (WHERE billable) AS b, 0 AS n
				FROM ins GROUP BY 1, 2
				UNION ALL SELECT account_id, month, 0, n FROM rel
			) x GROUP BY 1, 2 HAVING sum(b) > 0 OR sum(n) > 0
			ON CONFLICT (account_id, month) DO UPDATE SET billable = m.billable + EXCLUDED.billable,
				reserved = greatest(0, m.reserved - EXCLUDED.reserved)`
	}
	return `
		WITH ins AS (
			INSERT INTO usage_log (` + logColumnNames + `)
			SELECT * FROM unnest(` + unnestParams(1) + `)
			ON CONFLICT (item_key) DO NOTHING
			RETURNING account_id, (occurred_at AT TIME ZONE 'UTC') AS at, billable
		)` + release + `, daily AS (
			INSERT INTO usage_daily AS d (account_id, day, billable)
			SELECT account_id, at::date, count(*) FROM ins WHERE billable GROUP BY 1, 2
			ON CONFLICT (account_id, day) DO UPDATE SET billable = d.billable + EXCLUDED.billable
		)` + monthly
}

// Record writes rows to the usage log and adds the billable ones to the daily and monthly
// counters, in one statement: either all of it happens or none. Rows whose ItemKey is already
// logged are skipped and not counted again.
func Record(ctx context.Context, db DB, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, recordSQL, logColumns(rows)...)
	return err
}

// recordReserved is Record for the rows of a request with reservation id (recordReservedSQL).
func recordReserved(ctx context.Context, db DB, rows []Row, id uuid.UUID) error {
	if id == uuid.Nil {
		return Record(ctx, db, rows)
	}
	if len(rows) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, recordReservedSQL, append(logColumns(rows), id)...)
	return err
}

// units says what withdraw does with the free tier's monthly-quota unit of each row it removes.
type units int

const (
	keepUnits       units = iota // none goes back: the caller gives them back itself, or none are owed
	returnUnits                  // each removed row's unit goes back
	returnUnitsOnce              // each removed row's unit goes back unless returnDoubtfulUnits gave it already
)

// unitRefundID is the usage_refunds id that marks the quota unit of item key k of account $1 as
// given back (returnDoubtfulUnits, and withdraw with returnUnitsOnce), so that it goes back once
// whichever of the two comes first.
const unitRefundID = `md5('quota unit ' || $1::uuid::text || ' ' || k)::uuid`

// withdraw removes logged rows of accountID whose results never reached the client, and takes
// their billable ones back from the daily and monthly counters, in one statement: a result the
// client did not get is not billed. The quota units of the removed rows go back as u says. The sweep
// of a dead replica's rows gives them back once (returnUnitsOnce): the request whose Charge
// would have refunded them died with its process — or, for rows whose write had an unknown
// outcome, gave them back already (Charge.Close).
func withdraw(ctx context.Context, db DB, accountID string, itemKeys []string, u units) error {
	if len(itemKeys) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `WITH del AS (
			DELETE FROM usage_log WHERE account_id = $1::uuid AND item_key = ANY($2::text[])
			RETURNING (occurred_at AT TIME ZONE 'UTC')::date AS day, billable, quota_unit, item_key AS k
		), free AS (
			SELECT $3::int > 0 AND EXISTS (SELECT 1 FROM accounts WHERE id = $1::uuid AND tier = 'free') AS give
		), owed AS (
			SELECT day, billable, quota_unit AND (SELECT give FROM free) AS unit, `+unitRefundID+` AS once FROM del
		), marked AS (
			INSERT INTO usage_refunds (id) SELECT once FROM owed WHERE unit AND $3::int = 2 ORDER BY once
			ON CONFLICT (id) DO NOTHING RETURNING id
		), days AS (
			SELECT day, count(*) FILTER (WHERE billable)::int AS n,
				count(*) FILTER (WHERE unit AND ($3::int <> 2 OR once IN (SELECT id FROM marked)))::int AS q
			FROM owed GROUP BY day
		), daily AS (
			UPDATE usage_daily d SET billable = greatest(0, d.billable - days.n)
			FROM days WHERE d.account_id = $1::uuid AND d.day = days.day AND days.n > 0
		)
		UPDATE usage_monthly m SET billable = greatest(0, m.billable - x.n), quota_units = greatest(0, m.quota_units - x.q)
		FROM (SELECT date_trunc('month', day)::date AS month, sum(n)::int AS n, sum(q)::int AS q FROM days GROUP BY 1) x
		WHERE m.account_id = $1::uuid AND m.month = x.month AND (x.n > 0 OR x.q > 0)`, accountID, itemKeys, int(u))
	return err
}

// returnDoubtfulUnits gives back the quota units of the emails of itemKeys, whose rows' write had
// an unknown outcome (Charge.Close): as if the rows did not exist, but once per key, so that a
// row that did commit and is then swept as a dead replica's (withdraw, returnUnitsOnce) does not
// give its unit back a second time, whichever comes first. The marks are usage_refunds ids,
// cleared after a day like Refund's. Both statements insert their marks in id order, so that the
// two, running at once on the same keys, wait for each other rather than deadlock.
func returnDoubtfulUnits(ctx context.Context, db DB, accountID string, month time.Time, itemKeys []string) error {
	if len(itemKeys) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `WITH marked AS (
			INSERT INTO usage_refunds (id) SELECT `+unitRefundID+` AS once FROM unnest($2::text[]) AS k ORDER BY once
			ON CONFLICT (id) DO NOTHING RETURNING 1
		)
		UPDATE usage_monthly SET quota_units = greatest(0, quota_units - (SELECT count(*) FROM marked)::int)
		WHERE account_id = $1::uuid AND month = $3`, accountID, itemKeys, month)
	return err
}
