package usage

import (
	"context"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/pgtest"
)

func TestQuotaUsedReadsTheCurrentUTCMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	const acct = "6f1d4a52-1111-4c3e-9a55-000000000001"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'free')`, acct)
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, quota_units) VALUES
		($1, '2026-10-01', 499), ($1, '2026-11-01', 42)`, acct)

	// 00:30 on 1 December in UTC+2 is still 30 November in UTC.
	late := time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("UTC+2", 2*3600))
	tests := []struct {
		name string
		now  time.Time
		want int
	}{
		{"mid month", time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC), 42},
		{"UTC month decides, not local", late, 42},
		{"previous month", time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC), 499},
		{"month without a row", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 0},
	}
	for _, tt := range tests {
		got, err := QuotaUsed(context.Background(), pool, acct, tt.now)
		if err != nil || got != tt.want {
			t.Errorf("%s: QuotaUsed = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
}
