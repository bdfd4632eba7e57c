package usage

import (
	"context"
	"math"
	"time"
)

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
	rows, err := db.Query(ctx, `
		SELECT to_char(g.day, 'YYYY-MM-DD'), coalesce(d.billable, 0)
		FROM generate_series($2::date - ($3::int - 1), $2::date, interval '1 day') AS g(day)
		LEFT JOIN usage_daily d ON d.account_id = $1 AND d.day = g.day::date
		ORDER BY g.day`, accountID, today, DailyWindow)
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

// Summarize builds the usage summary. The free tier counts monthly-quota units, exactly as
// verify admission and account.usage_this_month do (docs/api.md, "Metering"); paid tiers count
// billable verifications, as GET /usage does (rule 4).
func Summarize(ctx context.Context, db DB, accountID string, tier string, free bool, included int, overagePrice float64, now time.Time) (Summary, error) {
	start := MonthStart(now)
	s := Summary{Period: Period{Start: start, End: start.AddDate(0, 1, 0)}, CallsIncluded: included, Tier: tier}
	var quota, billable int
	err := db.QueryRow(ctx, `SELECT coalesce(max(quota_units), 0), coalesce(max(billable), 0)
		FROM usage_monthly WHERE account_id = $1 AND month = $2`, accountID, start).Scan(&quota, &billable)
	if err != nil {
		return s, err
	}
	s.CallsUsed = billable
	if free {
		s.CallsUsed = quota
	}
	s.CallsRemaining = max(0, included-s.CallsUsed)
	s.OverageCalls = max(0, s.CallsUsed-included)
	if !free {
		s.EstimatedCostEUR = math.Round(float64(s.OverageCalls)*overagePrice*100) / 100
	}
	return s, nil
}
