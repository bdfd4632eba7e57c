// Package usage meters verification traffic: the free tier's monthly quota counter, the billable
// counters and the usage log. The counters live in Postgres so that every API replica sees the
// same numbers.
package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier is the part of a pgx pool or transaction this package reads with.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// MonthStart is the first instant of the UTC calendar month that contains t: quotas reset then.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// QuotaUsed is the free-tier monthly-quota count (usage_monthly.quota_units) of an account for
// the UTC calendar month containing now; 0 when nothing was counted yet.
func QuotaUsed(ctx context.Context, db Querier, accountID string, now time.Time) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT quota_units FROM usage_monthly WHERE account_id = $1 AND month = $2`,
		accountID, MonthStart(now)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read monthly quota: %w", err)
	}
	return n, nil
}
