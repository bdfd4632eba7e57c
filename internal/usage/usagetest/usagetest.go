// Package usagetest reads and seeds the metering domain for tests (docs/architecture.md,
// "Metering and admission"), so that tests name what they check (what an account was billed,
// what it holds, which rows were logged) instead of querying the usage tables themselves.
package usagetest

import (
	"context"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/usage"
)

// Counts are an account's metering counts over every month.
type Counts struct {
	Quota    int // free-tier units of delivered results
	Billable int // billable delivered results (usage_monthly)
	Daily    int // billable delivered results (usage_daily, summed over the days)
	Held     int // units held by open holds (usage_monthly.held)
	Holds    int // open holds
}

// Of reads account's counts.
func Of(t testing.TB, db database.DB, account string) Counts {
	t.Helper()
	var c Counts
	err := db.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(sum(quota_units), 0) FROM usage_monthly WHERE account_id = $1),
		(SELECT coalesce(sum(billable), 0) FROM usage_monthly WHERE account_id = $1),
		(SELECT coalesce(sum(billable), 0) FROM usage_daily WHERE account_id = $1),
		(SELECT coalesce(sum(held), 0) FROM usage_monthly WHERE account_id = $1),
		(SELECT count(*) FROM usage_holds WHERE account_id = $1)`, account).
		Scan(&c.Quota, &c.Billable, &c.Daily, &c.Held, &c.Holds)
	if err != nil {
		t.Fatalf("usagetest: counts of %s: %v", account, err)
	}
	return c
}

// Row is a logged usage row as tests look at it.
type Row struct {
	ItemKey     string
	Route       string
	EmailDomain string
	Status      string
	FailedCheck string
	ErrorClass  string
	Billable    bool
	QuotaUnit   bool
	HasSnapshot bool
	Email       string // the email of the result's snapshot, "" without one
}

// Rows reads account's usage rows, in the order they were logged.
func Rows(t testing.TB, db database.DB, account string) []Row {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT item_key, route, coalesce(email_domain, ''),
		coalesce(status, ''), coalesce(failed_check, ''), coalesce(error_class, ''), billable, quota_unit,
		snapshot IS NOT NULL, coalesce(snapshot->>'email', '')
		FROM usage_log WHERE account_id = $1 ORDER BY id`, account)
	if err != nil {
		t.Fatalf("usagetest: rows of %s: %v", account, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ItemKey, &r.Route, &r.EmailDomain, &r.Status, &r.FailedCheck, &r.ErrorClass,
			&r.Billable, &r.QuotaUnit, &r.HasSnapshot, &r.Email); err != nil {
			t.Fatalf("usagetest: rows of %s: %v", account, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("usagetest: rows of %s: %v", account, err)
	}
	return out
}

// Count is how many of rows pass keep.
func Count(rows []Row, keep func(Row) bool) int {
	n := 0
	for _, r := range rows {
		if keep(r) {
			n++
		}
	}
	return n
}

// Delivered keeps the rows of results (not of refused requests).
func Delivered(r Row) bool { return r.ErrorClass == "" }

// Refused keeps the rows of requests refused with error class class ("" for any class).
func Refused(class string) func(Row) bool {
	return func(r Row) bool { return r.ErrorClass != "" && (class == "" || r.ErrorClass == class) }
}

// SetMonth gives account, for the UTC month of now, the counts of results delivered earlier:
// quota free-tier units and billable results.
func SetMonth(t testing.TB, db database.DB, account string, now time.Time, quota, billable int) {
	t.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO usage_monthly (account_id, month, quota_units, billable)
		VALUES ($1, $2, $3, $4) ON CONFLICT (account_id, month) DO UPDATE SET quota_units = EXCLUDED.quota_units,
		billable = EXCLUDED.billable`, account, usage.MonthStart(now), quota, billable)
	if err != nil {
		t.Fatalf("usagetest: set month of %s: %v", account, err)
	}
}

// Expire makes every hold of account past its lifetime and runs the sweep (usage.Expire), as if
// the replicas that hold them had died long enough ago. It returns how many holds the sweep ended.
func Expire(t testing.TB, db database.DB, account string) int {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `UPDATE usage_holds SET expires_at = now() - interval '1 second'
		WHERE account_id = $1 AND expires_at IS NOT NULL`, account); err != nil {
		t.Fatalf("usagetest: expire holds of %s: %v", account, err)
	}
	n, err := usage.Expire(ctx, db)
	if err != nil {
		t.Fatalf("usagetest: sweep: %v", err)
	}
	return n
}

// Settle waits until every request's hold in the database is released (their rows billed before
// them, as a Ledger writes them in order), for up to ten seconds: tests call it after their
// requests have been answered, since a Ledger bills and releases behind the responses. The holds
// of lists and jobs, which never expire, are theirs until they end and are not waited for.
func Settle(t testing.TB, db database.DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var open int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM usage_holds WHERE expires_at IS NOT NULL`).Scan(&open); err != nil {
			t.Fatalf("usagetest: open holds: %v", err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("usagetest: %d request holds still open after 10 s", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SetDay gives account, for the UTC day of now, billable results delivered earlier (usage_daily).
func SetDay(t testing.TB, db database.DB, account string, now time.Time, billable int) {
	t.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO usage_daily (account_id, day, billable) VALUES ($1, $2::date, $3)
		ON CONFLICT (account_id, day) DO UPDATE SET billable = EXCLUDED.billable`, account, now.UTC().Format("2006-01-02"), billable)
	if err != nil {
		t.Fatalf("usagetest: set day of %s: %v", account, err)
	}
}
