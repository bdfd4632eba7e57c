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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what this package needs of Postgres: a pool or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

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
	// HardCapEUR is the paid account's spend cap for the period; nil means none.
	HardCapEUR *float64
	OverageEUR float64 // price of one billable call over MonthlyCalls
	Now        time.Time
}

// Decision is the outcome of a successful admission, for the RateLimit-* response headers.
type Decision struct {
	Limit     int
	Remaining int
	Reset     time.Time // end of the current one-minute window
	// QuotaCharged is how many free-tier quota units were taken (to refund if the request then
	// fails before verifying anything).
	QuotaCharged int
	Month        time.Time
}

// RateLimited is returned when the per-minute limit would be exceeded.
type RateLimited struct {
	Limit int
	Used  int
	Reset time.Time
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("rate limit of %d per minute exceeded", e.Limit)
}

// QuotaExceeded is returned when the free tier's monthly quota would be exceeded.
type QuotaExceeded struct {
	Limit int
	Used  int
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

// Admit takes the request's rate-limit units and, on the free tier, its quota units, or says why
// not. It costs one round trip to Postgres: the rate step and the quota step (free tier) or the
// spend-cap read (paid tiers) are one statement. Rate-limit units are spent even when the quota
// then refuses, so a client hammering past its quota is still throttled; quota units are taken
// only when the whole request fits both.
func Admit(ctx context.Context, db DB, r Request) (Decision, error) {
	now := r.Now.UTC()
	window := now.Truncate(time.Minute)
	d := Decision{Limit: r.RatePerMin, Reset: window.Add(time.Minute), Month: MonthStart(now)}

	var (
		used     *int
		quota    *int
		capEUR   *float64
		billable int
		err      error
	)
	if r.Free {
		err = db.QueryRow(ctx, `WITH `+rateCTE+`, q AS (
			INSERT INTO usage_monthly AS m (account_id, month, quota_units)
			SELECT $1, $5, $3::int WHERE $3::int <= $6::int AND EXISTS (SELECT 1 FROM r)
			ON CONFLICT (account_id, month)
			DO UPDATE SET quota_units = m.quota_units + EXCLUDED.quota_units
			WHERE m.quota_units + EXCLUDED.quota_units <= $6::int
			RETURNING quota_units)
			SELECT (SELECT used FROM r), (SELECT quota_units FROM q)`,
			r.AccountID, window, r.Units, r.RatePerMin, d.Month, r.MonthlyCalls).Scan(&used, &quota)
		if err != nil {
			// On the free tier this statement is the monthly-quota check (spec §7: 503
			// quota_check_failed).
			return d, fmt.Errorf("%w: %v", ErrQuotaCheck, err)
		}
	} else {
		err = db.QueryRow(ctx, `WITH `+rateCTE+`
			SELECT (SELECT used FROM r), a.hard_cap_eur::float8, coalesce(m.billable, 0)
			FROM accounts a LEFT JOIN usage_monthly m ON m.account_id = a.id AND m.month = $5
			WHERE a.id = $1`,
			r.AccountID, window, r.Units, r.RatePerMin, d.Month).Scan(&used, &capEUR, &billable)
		if err != nil {
			return d, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}

	if used == nil {
		cur := 0
		if err := db.QueryRow(ctx, `SELECT used FROM rate_windows WHERE account_id = $1 AND window_start = $2`,
			r.AccountID, window).Scan(&cur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return d, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return d, &RateLimited{Limit: r.RatePerMin, Used: cur, Reset: d.Reset}
	}
	d.Remaining = max(0, r.RatePerMin-*used)

	if r.Free {
		if quota == nil {
			cur, err := QuotaUsed(ctx, db, r.AccountID, now)
			if err != nil {
				return d, fmt.Errorf("%w: %v", ErrQuotaCheck, err)
			}
			return d, &QuotaExceeded{Limit: r.MonthlyCalls, Used: cur, Reset: d.Month.AddDate(0, 1, 0)}
		}
		d.QuotaCharged = r.Units
		return d, nil
	}

	// Paid tiers: the account's hard spend cap (null means none). Worst case: every email of the
	// request turns out billable. Compared unrounded, so a cap is never crossed by a fraction of
	// a cent.
	if capEUR != nil {
		worst := float64(max(0, billable+r.Units-r.MonthlyCalls)) * r.OverageEUR
		if worst > *capEUR+1e-9 {
			return d, &SpendCapExceeded{HardCapEUR: capEUR, CurrentOverageEUR: overageEUR(billable, r.MonthlyCalls, r.OverageEUR)}
		}
	}
	return d, nil
}

// Refund gives back quota units taken by Admit for a request that then failed before any email
// entered verification (a 503 from the verifier tier, say), so that failure costs the client
// nothing.
func Refund(ctx context.Context, db DB, accountID string, d Decision) error {
	if d.QuotaCharged == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `UPDATE usage_monthly SET quota_units = greatest(0, quota_units - $3)
		WHERE account_id = $1 AND month = $2`, accountID, d.Month, d.QuotaCharged)
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

// PruneRateWindows deletes rate-limit windows that ended before now minus one minute. Any
// replica may run it; it touches only rows no request will read again.
func PruneRateWindows(ctx context.Context, db DB, now time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM rate_windows WHERE window_start < $1`, now.UTC().Truncate(time.Minute).Add(-time.Minute))
	return tag.RowsAffected(), err
}
