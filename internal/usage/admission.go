// Package usage meters verification traffic: admission control (the per-minute rate limit, the
// free tier's monthly quota and the paid tiers' hard spend cap), the usage log, and the counts
// behind GET /v1/management/usage, /usage/summary and account.usage_this_month.
//
// Every counter lives in Postgres and is changed by a single conditional UPSERT, so any number of
// API replicas share one limit and concurrent requests can never overshoot it.
package usage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/database"
)

// DB is the one database interface of Mailvet's stores (database.DB): a pool, a connection or a
// transaction.
type DB = database.DB

// Request describes what a verify request asks to spend.
type Request struct {
	AccountID string
	Free      bool // free tier: monthly quota applies; paid tiers: spend cap applies
	// Units is the number of emails in the request: each needs one rate-limit unit and, on the
	// free tier, one quota unit.
	Units int
	// RatePerMin and MonthlyCalls are the account's plan limits.
	RatePerMin   int
	MonthlyCalls int
	OverageEUR   float64 // price of one billable call over MonthlyCalls
	Now          time.Time
	// NoRate leaves the per-minute rate limit out: a bulk list is paced by the fleet, not by the
	// caller (docs/lists.md, "Metering"), and its units must not use up the rate window of the
	// account's other requests. The quota and spend-cap steps are the same.
	NoRate bool
	// Rows are usage-log rows written, and their billable ones counted, by the admission statement
	// itself, only when the request is admitted. The API uses this to make a single email's usage
	// row durable without a second commit: a local result's row is complete; a row still waiting
	// for the worker fleet's verdict has an empty Status, and Verdicts fills it in. Their
	// OccurredAt is Now. Item keys must be fresh: a key already logged fails the whole statement
	// rather than count twice.
	Rows []Row
	// Reservation, for a paid request without Rows, is the id under which its emails are
	// reserved under the hard spend cap until its results are recorded (Record with the
	// decision) or it ends (Release); ReservedBy is the API replica that holds it, so that the
	// sweep releases it if the replica dies (Holds). The zero id reserves nothing: a bulk list
	// counts as its own reservation (listsOutstanding). Accounts without a cap reserve nothing.
	Reservation uuid.UUID
	ReservedBy  string
}

// Decision is the outcome of a successful admission, for the RateLimit-* response headers and
// for Refund.
type Decision struct {
	AccountID string
	Limit     int
	Remaining int
	// RateRead says Remaining was read from the rate window: admission got past its rate step,
	// also when a later step refused or failed. Without it Remaining is not known.
	RateRead bool
	Reset    time.Time // end of the current one-minute window
	// QuotaCharged is how many free-tier quota units were taken (to refund if the request then
	// fails before verifying anything).
	QuotaCharged int
	Month        time.Time
	Day          time.Time // UTC day of the rows written with the admission
	// Logged are the item keys of the rows written with the admission.
	Logged []string
	// Room is how many more emails the account could send now: the least of the rate window's
	// remaining units and the free quota left or, on paid tiers, the emails the spend cap still
	// allows. A hint for Headroom, not a promise.
	Room int
	// RefundID, when set, makes Refund of this decision count once however often it is retried
	// (a statement that committed but whose answer was lost is retried): see Refund.
	RefundID uuid.UUID
	// Reservation is the request's open reservation under the spend cap (Request.Reservation),
	// or the zero id when admission made none.
	Reservation uuid.UUID
}

// RateLimited is returned when the per-minute limit would be exceeded.
type RateLimited struct {
	Limit int
	Used  int
	Asked int // the emails of the refused request
	Reset time.Time
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("rate limit of %d per minute exceeded", e.Limit)
}

// QuotaExceeded is returned when the free tier's monthly quota would be exceeded.
type QuotaExceeded struct {
	Limit int
	Used  int
	Asked int       // the verifications of the refused request
	Reset time.Time // start of the next UTC month
}

func (e *QuotaExceeded) Error() string {
	return fmt.Sprintf("monthly quota of %d verifications exceeded (%d used)", e.Limit, e.Used)
}

// SpendCapExceeded is returned when a paid request could take the period's overage past the cap.
type SpendCapExceeded struct {
	HardCapEUR        *float64
	CurrentOverageEUR float64
}

func (e *SpendCapExceeded) Error() string { return "hard spend cap would be exceeded" }

// ErrQuotaCheck wraps a datastore failure while checking the free quota (503 quota_check_failed).
var ErrQuotaCheck = errors.New("monthly quota check failed")

// ErrUnavailable wraps a datastore failure elsewhere in admission (503 service_unavailable).
var ErrUnavailable = errors.New("usage datastore unavailable")

// MonthStart is the first instant of t's UTC calendar month.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// rateCTE adds the request's units to its rate window only if the window stays within the limit
// ($1 account, $2 window start, $3 units, $4 limit), returning the new count, or no row when the
// request does not fit. A request larger than the whole limit can never pass.
const rateCTE = `r AS (
		INSERT INTO rate_windows AS w (account_id, window_start, used)
		SELECT $1, $2, $3::int WHERE $3::int <= $4::int
		ON CONFLICT (account_id, window_start)
		DO UPDATE SET used = w.used + EXCLUDED.used WHERE w.used + EXCLUDED.used <= $4::int
		RETURNING used)`

// The admission statement's parameters: $1 account, $2 window start, $3 units, $4 rate limit,
// $5 month, $6 monthly calls (the free quota, or the calls included in a paid plan); on paid
// tiers $7 the overage price. With rows, then: the rows' billable count, their UTC day, and the
// arrays of logColumns.

// logCTE writes the request's rows (arrays from $<first+2>) and adds their billable count
// ($<first>) to their day's counter ($<first+1>), only if the CTE named gate has a row. The
// month's counter is the caller's: one statement may change a usage_monthly row only once.
func logCTE(gate string, first int) string {
	return fmt.Sprintf(`ins AS (
			INSERT INTO usage_log (%s)
			SELECT * FROM unnest(%s) WHERE EXISTS (SELECT 1 FROM %s)
			RETURNING 1
		), daily AS (
			INSERT INTO usage_daily AS d (account_id, day, billable)
			SELECT $1, $%[5]d::date, $%[4]d::int WHERE $%[4]d::int > 0 AND EXISTS (SELECT 1 FROM %[3]s)
			ON CONFLICT (account_id, day) DO UPDATE SET billable = d.billable + EXCLUDED.billable
		)`, logColumnNames, unnestParams(first+2), gate, first, first+1)
}

// noRateCTE stands in for rateCTE when a request is not rate limited (Request.NoRate). It names
// $2 and $4 so that the statement takes the same parameters as the rate-limited one.
const noRateCTE = `r AS (SELECT 0 AS used WHERE $2::timestamptz IS NOT NULL AND $4::int IS NOT NULL)`

// listsOutstanding counts, in the paid admission, the addresses the account's bulk lists still
// have to verify ($1 the account): each was admitted against the cap at upload, worst case
// billable, but is billed only as its chunk is written. Counting them keeps every later request,
// and every later list, from spending the same room under the cap while a list runs
// (docs/lists.md, "Metering"). A list's verified count and its billable rows move in one
// transaction, so an address is never counted both here and in billable; a list that is canceled,
// deleted or failed stops counting at once, and one that crosses a month boundary counts against
// the month in which its remaining addresses will be billed. Only accounts with a cap evaluate it.
const listsOutstanding = `SELECT coalesce(sum(l.unique_addresses - l.verified), 0) FROM lists l
				WHERE l.account_id = $1 AND l.state IN ('queued', 'running')`

// jobsOutstanding counts, in the paid admission, the account's async jobs not finished yet ($1
// the account): each was admitted against the cap as one billable email, but its billable row is
// written only when it completes (in the transaction that finishes it, so a job is never counted
// both here and in billable). Without it every async request would be checked against the same
// count, and any number of them could pass the cap while their jobs wait, or are greylisted.
const jobsOutstanding = `SELECT count(*) FROM jobs j
				WHERE j.account_id = $1 AND j.state IN ('pending', 'processing', 'retrying')`

// reservedBefore counts, in the paid admission, the emails still reserved by the account's
// requests admitted in an earlier month ($1 the account, $5 this month): their results are billed
// in the month they are recorded, this one, but their reservation sits on the month row of their
// admission, which this month's admissions do not read. The statement's snapshot is enough here:
// no reservation is opened in a month that is over.
const reservedBefore = `SELECT coalesce(sum(v.emails), 0) FROM usage_reservations v
				WHERE v.account_id = $1 AND v.month < $5`

// admitSQL is the admission statement of the free or the paid tiers, with or without rows to
// write (a statement without them is the leaner for Postgres to plan and run), with or without
// the rate step.
//
// Free: the rate window, then the monthly quota, then the rows.
//
// Paid: the rate window, then the hard spend cap, then the rows. The cap is checked against the
// worst case, every email of the request billable, in float8 and unrounded, so a cap is never
// crossed by a fraction of a cent; the addresses the account's running bulk lists have still to
// verify, and its async jobs not finished yet, count as billed (listsOutstanding,
// jobsOutstanding). A request that writes its billable rows at admission (a single email) adds
// them to the month row; one that records them later (a batch, a stream, an async job: a
// Request with a Reservation) reserves its emails on the month row instead (usage_monthly.
// reserved, one usage_reservations row per request), until its results are recorded or it ends
// (Charge). Either way each admission is decided on the month row's latest billable and reserved
// counts under its lock, so requests admitted at the same time, or while others run, cannot pass
// the cap together.
func admitSQL(free, rows, rate bool) string {
	var b strings.Builder
	if rate {
		b.WriteString("WITH " + rateCTE)
	} else {
		b.WriteString("WITH " + noRateCTE)
	}
	if free {
		const first = 7
		billCol, billVal, billSet := "", "", ""
		if rows {
			billCol, billVal = ", billable", fmt.Sprintf(", $%d::int", first)
			billSet = ", billable = m.billable + EXCLUDED.billable"
		}
		fmt.Fprintf(&b, `, q AS (
			INSERT INTO usage_monthly AS m (account_id, month, quota_units%s)
			SELECT $1, $5, $3::int%s WHERE $3::int <= $6::int AND EXISTS (SELECT 1 FROM r)
			ON CONFLICT (account_id, month)
			DO UPDATE SET quota_units = m.quota_units + EXCLUDED.quota_units%s
			WHERE m.quota_units + EXCLUDED.quota_units <= $6::int
			RETURNING quota_units)`, billCol, billVal, billSet)
		if rows {
			b.WriteString(", " + logCTE("q", first))
		}
		b.WriteString(`
		SELECT (SELECT used FROM r), (SELECT quota_units FROM q)`)
		return b.String()
	}
	const first = 8
	billable, reserve := "0", "0"
	if rows {
		billable = fmt.Sprintf("$%d::int", first)
	} else {
		// $8 the emails to reserve (0: none), $9 the reservation's id, $10 its holder.
		reserve = `CASE WHEN acct.cap IS NULL THEN 0 ELSE $8::int END`
	}
	// fits is the cap check against a month's count: every email of the request billable, worst
	// case, and the emails of the account's open reservations, running lists and unfinished async
	// jobs as if billed.
	fits := func(count string) string {
		return `greatest(0, ` + count + ` + (` + listsOutstanding + `) + (` + jobsOutstanding + `) + (` + reservedBefore + `) + $3::int - $6::int)::float8 * $7::float8 <= (SELECT cap FROM acct) + 1e-9`
	}
	// month adds the rows' billable count, or the emails it reserves, to the month only if the
	// request fits under the cap. Its ON CONFLICT condition is evaluated on the row's latest
	// version, after waiting for the row lock of any admission in flight, so concurrent
	// admissions (alone or in groups) cannot pass the cap together: each sees what the others
	// billed or reserved. Without a cap, and with nothing billable, it writes nothing.
	fmt.Fprintf(&b, `, acct AS (
			SELECT a.hard_cap_eur::float8 AS cap,
				coalesce((SELECT m.billable FROM usage_monthly m WHERE m.account_id = $1 AND m.month = $5), 0) AS billable
			FROM accounts a WHERE a.id = $1
		), month AS (
			INSERT INTO usage_monthly AS m (account_id, month, billable, reserved)
			SELECT $1, $5, %[1]s, %[4]s FROM acct
			WHERE EXISTS (SELECT 1 FROM r) AND (%[1]s > 0 OR acct.cap IS NOT NULL) AND (acct.cap IS NULL OR %[2]s)
			ON CONFLICT (account_id, month) DO UPDATE SET billable = m.billable + EXCLUDED.billable,
				reserved = m.reserved + EXCLUDED.reserved
			WHERE (SELECT cap FROM acct) IS NULL OR %[3]s
			RETURNING 1
		), ok AS (
			SELECT 1 FROM r, acct WHERE acct.cap IS NULL OR EXISTS (SELECT 1 FROM month)
		)`, billable, fits("0"), fits("m.billable + m.reserved"), reserve)
	if rows {
		// The last column (always false: nothing is reserved) reads month, so that the month
		// step runs in the main query, before the rows and usage_daily, whether or not ok
		// needed it (without a cap it does not): every metering statement locks usage_monthly
		// before usage_daily (recordSQL). Left to run after the main query, with the other
		// steps nothing reads, it ran after the daily one, and Record and single verifications
		// of an account without a cap deadlocked.
		b.WriteString(", " + logCTE("ok", first))
		b.WriteString(`
		SELECT (SELECT used FROM r), acct.cap, acct.billable, EXISTS (SELECT 1 FROM ok), (SELECT count(*) FROM month) < 0 FROM acct`)
		return b.String()
	}
	b.WriteString(`, res AS (
			INSERT INTO usage_reservations (id, account_id, month, emails, held_by)
			SELECT $9::uuid, $1, $5, $8::int, $10::uuid FROM acct
			WHERE acct.cap IS NOT NULL AND $8::int > 0 AND EXISTS (SELECT 1 FROM month)
			RETURNING 1
		)
		SELECT (SELECT used FROM r), acct.cap, acct.billable, EXISTS (SELECT 1 FROM ok), EXISTS (SELECT 1 FROM res) FROM acct`)
	return b.String()
}

// admitStatements holds admitSQL's statements, indexed [free][rows][rate].
var admitStatements = func() (st [2][2][2]string) {
	for _, free := range []bool{false, true} {
		for _, rows := range []bool{false, true} {
			for _, rate := range []bool{false, true} {
				st[b2i(free)][b2i(rows)][b2i(rate)] = admitSQL(free, rows, rate)
			}
		}
	}
	return st
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Admit takes the request's rate-limit units and, on the free tier, its quota units, writes the
// request's rows, or says why not. It costs one round trip to Postgres and one commit: the rate
// step, the quota step (free tier) or the spend-cap check (paid tiers) and the rows are one
// statement. Rate-limit units are spent even when the quota or the cap then refuses, so a client
// hammering past its quota is still throttled; quota units are taken and rows written only when
// the whole request fits. An Admitter runs the same statement for many requests in one
// transaction (docs/api.md, "Metering").
func Admit(ctx context.Context, db DB, r Request) (Decision, error) {
	a := newAdmission(r)
	if err := ctx.Err(); err != nil {
		return a.d, notSent{a.failed(err)} // the caller has gone: nothing is sent
	}
	if err := a.scan(db.QueryRow(ctx, a.sql, a.args...)); err != nil {
		return a.d, a.failed(err)
	}
	return a.decide(ctx, db)
}

// admission is one request on its way through the admission statement: the statement and its
// arguments, then what the statement returned. Admit runs it alone and an Admitter runs many in
// one transaction; both read the outcome with decide, so the rules are written once.
type admission struct {
	r    Request
	now  time.Time
	d    Decision
	sql  string
	args []any

	// The statement's answer: the rate window's count (nil: refused), the free quota's count
	// (nil: refused), and on paid tiers the cap, the month's billable count and the cap's verdict.
	used, quota *int
	capEUR      *float64
	monthBill   int
	capOK       bool
	reserved    bool
}

func newAdmission(r Request) *admission {
	now := r.Now.UTC()
	window := now.Truncate(time.Minute)
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	a := &admission{r: r, now: now,
		d: Decision{AccountID: r.AccountID, Limit: r.RatePerMin, Reset: WindowEnd(now), Month: MonthStart(now), Day: day}}

	a.args = []any{r.AccountID, window, r.Units, r.RatePerMin, a.d.Month, r.MonthlyCalls}
	if !r.Free {
		a.args = append(a.args, r.OverageEUR)
		if len(r.Rows) == 0 {
			reserve, holder := 0, any(nil)
			if r.Reservation != uuid.Nil {
				reserve = r.Units
			}
			if r.ReservedBy != "" {
				holder = r.ReservedBy
			}
			a.args = append(a.args, reserve, r.Reservation, holder)
		}
	}
	if len(r.Rows) > 0 {
		billable := 0
		for i := range r.Rows {
			r.Rows[i].OccurredAt = now
			if r.Rows[i].Billable {
				billable++
			}
		}
		a.args = append(append(a.args, billable, day), logColumns(r.Rows)...)
	}
	a.sql = admitStatements[b2i(r.Free)][b2i(len(r.Rows) > 0)][b2i(!r.NoRate)]
	return a
}

// scan reads the admission statement's answer from row.
func (a *admission) scan(row pgx.Row) error {
	if a.r.Free {
		return row.Scan(&a.used, &a.quota)
	}
	return row.Scan(&a.used, &a.capEUR, &a.monthBill, &a.capOK, &a.reserved)
}

// failed is the error of an admission whose statement failed: on the free tier the statement is
// the monthly-quota check (docs/errors.md: 503 quota_check_failed).
func (a *admission) failed(err error) error {
	out := fmt.Errorf("%w: %v", ErrUnavailable, err)
	if a.r.Free {
		out = fmt.Errorf("%w: %v", ErrQuotaCheck, err)
	}
	if pgconn.SafeToRetry(err) {
		return notSent{out}
	}
	return out
}

// notSent marks the error of an admission whose statement never reached Postgres (its context
// ended first, its connection could not be had): it wrote nothing, so there is nothing to take
// back (Ledger.Admit).
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// admitted reports whether the statement admitted the request (wrote its rows and took its
// quota units).
func (a *admission) admitted() bool {
	if a.used == nil {
		return false
	}
	if a.r.Free {
		return a.quota != nil
	}
	return a.capOK
}

// WindowEnd is when the one-minute rate window that holds now ends (Decision.Reset).
func WindowEnd(now time.Time) time.Time { return now.UTC().Truncate(time.Minute).Add(time.Minute) }

// RateUsed is how many emails the account has used of the one-minute rate window that holds now
// (0 when it has none yet).
func RateUsed(ctx context.Context, db DB, account string, now time.Time) (int, error) {
	used := 0
	err := db.QueryRow(ctx, `SELECT used FROM rate_windows WHERE account_id = $1 AND window_start = $2`,
		account, now.UTC().Truncate(time.Minute)).Scan(&used)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return used, err
}

// decide turns the statement's answer into the decision or the refusal; a refusal reads the
// count it reports from db.
func (a *admission) decide(ctx context.Context, db DB) (Decision, error) {
	r, d := a.r, a.d
	if a.used == nil {
		cur, err := RateUsed(ctx, db, r.AccountID, a.now)
		if err != nil {
			return d, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return d, &RateLimited{Limit: r.RatePerMin, Used: cur, Asked: r.Units, Reset: d.Reset}
	}
	d.Remaining, d.RateRead = max(0, r.RatePerMin-*a.used), true

	if r.Free {
		if a.quota == nil {
			cur, err := QuotaUsed(ctx, db, r.AccountID, a.now)
			if err != nil {
				return d, fmt.Errorf("%w: %v", ErrQuotaCheck, err)
			}
			return d, &QuotaExceeded{Limit: r.MonthlyCalls, Used: cur, Asked: r.Units, Reset: d.Month.AddDate(0, 1, 0)}
		}
		d.QuotaCharged = r.Units
		d.Room = min(d.Remaining, max(0, r.MonthlyCalls-*a.quota))
	} else if !a.capOK {
		return d, &SpendCapExceeded{HardCapEUR: a.capEUR, CurrentOverageEUR: overageEUR(a.monthBill, r.MonthlyCalls, r.OverageEUR)}
	} else {
		d.Room = min(d.Remaining, capRoom(a.capEUR, a.monthBill+r.Units, r.MonthlyCalls, r.OverageEUR))
	}
	for _, row := range r.Rows {
		d.Logged = append(d.Logged, row.ItemKey)
	}
	if a.reserved {
		d.Reservation = r.Reservation
	}
	return d, nil
}

// Refund undoes what Admit charged for a request that then failed before its emails were
// verified (a 503 from the verifier tier, say), so that failure costs the client nothing: it
// removes the rows Admit wrote that still wait for a verdict, with their billable counts, and
// gives back the quota units, in one statement. Rate-limit units are not given back.
//
// The quota unit of a row goes back with the row, only if this statement removes it: a row
// another replica's sweep removed first (a replica cut off from Postgres past its grace) had its
// unit given back there, so a late refund cannot give it twice. d.QuotaCharged beyond the rows
// d.Logged names are units of emails that never had a row; those go back as a number, once per
// d.RefundID: a retry of a refund whose statement committed but whose answer was lost finds the
// id recorded (usage_refunds, kept a day) and gives nothing back again.
func Refund(ctx context.Context, db DB, d Decision) error {
	if d.QuotaCharged == 0 && len(d.Logged) == 0 {
		return nil
	}
	keys := d.Logged
	if keys == nil {
		keys = []string{}
	}
	rowless := max(0, d.QuotaCharged-len(d.Logged))
	var once any // NULL: no refund id, the units go back every time
	if d.RefundID != uuid.Nil {
		once = d.RefundID
	}
	_, err := db.Exec(ctx, `WITH once AS (
			INSERT INTO usage_refunds (id) SELECT $6::uuid WHERE $6::uuid IS NOT NULL
			ON CONFLICT (id) DO NOTHING RETURNING 1
		), old AS (
			DELETE FROM usage_refunds WHERE id IN (
				SELECT id FROM usage_refunds WHERE created_at < now() - interval '1 day' LIMIT 100)
		), rowless AS (
			SELECT CASE WHEN $6::uuid IS NULL OR EXISTS (SELECT 1 FROM once) THEN $4::int ELSE 0 END AS n
		), del AS (
			DELETE FROM usage_log WHERE item_key = ANY($5::text[]) AND status IS NULL RETURNING billable, quota_unit
		), b AS (
			SELECT count(*) FILTER (WHERE billable)::int AS n,
				count(*) FILTER (WHERE quota_unit AND EXISTS (SELECT 1 FROM accounts WHERE id = $1 AND tier = 'free'))::int AS q
			FROM del
		), daily AS (
			UPDATE usage_daily SET billable = greatest(0, billable - (SELECT n FROM b))
			WHERE account_id = $1 AND day = $3 AND (SELECT n FROM b) > 0
		)
		UPDATE usage_monthly SET quota_units = greatest(0, quota_units - (SELECT n FROM rowless) - (SELECT q FROM b)),
			billable = greatest(0, billable - (SELECT n FROM b))
		WHERE account_id = $1 AND month = $2`, d.AccountID, d.Month, d.Day, rowless, keys, once)
	return err
}

// QuotaUsed is the free-tier monthly-quota count for now's UTC month (account.usage_this_month).
func QuotaUsed(ctx context.Context, db DB, accountID string, now time.Time) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT quota_units FROM usage_monthly WHERE account_id = $1 AND month = $2`,
		accountID, MonthStart(now)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// overageEUR prices the billable calls beyond the included volume, rounded to the cent.
func overageEUR(billable, included int, price float64) float64 {
	over := max(0, billable-included)
	return math.Round(float64(over)*price*100) / 100
}

// pruneTimeout bounds PruneRateWindows. It is background work, and a minute's windows of every
// active account can take longer to delete than the pool's default deadline for request-path
// statements (database.QueryTimeout).
const pruneTimeout = 30 * time.Second

// PruneRateWindows deletes rate-limit windows that ended before now minus one minute. Any
// replica may run it; it touches only rows no request will read again.
func PruneRateWindows(ctx context.Context, db DB, now time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	tag, err := db.Exec(ctx, `DELETE FROM rate_windows WHERE window_start < $1`, now.UTC().Truncate(time.Minute).Add(-time.Minute))
	return tag.RowsAffected(), err
}
