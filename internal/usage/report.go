package usage

import (
	"context"
	"math"
	"time"
)

// month reads the counts of account's month (sql/month.sql).
func month(ctx context.Context, db DB, account string, start time.Time) (quota, billable, held int, err error) {
	err = db.QueryRow(ctx, monthSQL, account, start).Scan(&quota, &billable, &held)
	return quota, billable, held, err
}

// Used is the one count of "calls used this month" (docs/api.md, "Metering"): the usage
// summary's calls_used and the account's usage_this_month are both this number, so that no two
// views of the account disagree. The free tier counts monthly-quota units delivered and held by
// requests, lists and jobs still running, as admission does; paid tiers count billable
// verifications, what the overage is billed on (quota units do not grow there: a paid account
// that was free earlier in the month would otherwise show the units of its free days).
func Used(quota, billable, held int, free bool) int {
	if free {
		return quota + held
	}
	return billable
}

// QuotaUsed is the free tier's count for now's UTC month: MonthUsed of a free account, the
// monthly-quota units admission counts.
func QuotaUsed(ctx context.Context, db DB, accountID string, now time.Time) (int, error) {
	return MonthUsed(ctx, db, accountID, true, now)
}

// MonthUsed is Used for now's UTC month of account (account.usage_this_month).
func MonthUsed(ctx context.Context, db DB, accountID string, free bool, now time.Time) (int, error) {
	quota, billable, held, err := month(ctx, db, accountID, MonthStart(now))
	return Used(quota, billable, held, free), err
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
	tag, err := db.Exec(ctx, pruneSQL, now.UTC().Truncate(time.Minute).Add(-time.Minute))
	return tag.RowsAffected(), err
}

// Day is one entry of GET /v1/management/usage (docs/api.md).
type Day struct {
	Date  string `json:"date"`
	Calls int    `json:"calls"`
}

// DailyWindow is the number of days GET /usage reports, today (UTC) included.
const DailyWindow = 30

// Daily returns billable verifications per UTC day for the last 30 days, oldest first, with the
// days without calls included as zero.
func Daily(ctx context.Context, db DB, accountID string, now time.Time) ([]Day, error) {
	today := now.UTC().Truncate(24 * time.Hour)
	rows, err := db.Query(ctx, dailySQL, accountID, today, DailyWindow)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	days := make([]Day, 0, DailyWindow)
	for rows.Next() {
		var d Day
		if err := rows.Scan(&d.Date, &d.Calls); err != nil {
			return nil, err
		}
		days = append(days, d)
	}
	return days, rows.Err()
}

// Period is the current UTC calendar month.
type Period struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Summary is GET /v1/management/usage/summary (docs/api.md).
type Summary struct {
	Period           Period  `json:"period"`
	CallsUsed        int     `json:"calls_used"`
	CallsIncluded    int     `json:"calls_included"`
	CallsRemaining   int     `json:"calls_remaining"`
	OverageCalls     int     `json:"overage_calls"`
	EstimatedCostEUR float64 `json:"estimated_cost_eur"`
	Tier             string  `json:"tier"`
}

// Summarize builds the usage summary. calls_used is Used: the free tier counts monthly-quota
// units delivered or held, exactly as verify admission does (docs/api.md, "Metering"); paid
// tiers count billable verifications, as GET /usage does (rule 4). account.usage_this_month is
// the same number.
func Summarize(ctx context.Context, db DB, accountID string, tier string, free bool, included int, overagePrice float64, now time.Time) (Summary, error) {
	start := MonthStart(now)
	s := Summary{Period: Period{Start: start, End: start.AddDate(0, 1, 0)}, CallsIncluded: included, Tier: tier}
	quota, billable, held, err := month(ctx, db, accountID, start)
	if err != nil {
		return s, err
	}
	s.CallsUsed = Used(quota, billable, held, free)
	s.CallsRemaining = max(0, included-s.CallsUsed)
	if free {
		// The free tier has no overage: admission refuses past the quota instead. Its count can
		// still pass the quota (a downgrade while paid requests held room, a quota lowered during
		// the month), which is no call charged (docs/api.md, "GET /v1/management/usage/summary").
		return s, nil
	}
	s.OverageCalls = max(0, s.CallsUsed-included)
	s.EstimatedCostEUR = math.Round(float64(s.OverageCalls)*overagePrice*100) / 100
	return s, nil
}
