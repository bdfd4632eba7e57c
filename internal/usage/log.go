package usage

import (
	"context"
	"time"
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
	// (rate_limit for rate_limit_exceeded, spec §7 rule 3).
	ErrorClass string
	// Billable: the email passed layer 1 (spec §4.2 rule 1).
	Billable bool
	// QuotaUnit: the email entered verification (free-tier monthly quota, DESIGN §3.3).
	QuotaUnit bool
	Snapshot  []byte // JSON; nil for none
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Record writes rows to the usage log and adds the billable ones to the daily and monthly
// counters, in one statement: either all of it happens or none. Rows whose ItemKey is already
// logged are skipped and not counted again.
func Record(ctx context.Context, db DB, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	var (
		accounts, keys, items, routes, domains, statuses, checks, classes, snaps = make([]string, n),
			make([]*string, n), make([]string, n), make([]string, n), make([]*string, n),
			make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		times              = make([]time.Time, n)
		billable, quotaBit = make([]bool, n), make([]bool, n)
	)
	for i, r := range rows {
		accounts[i] = r.AccountID
		keys[i] = nullable(r.KeyID)
		items[i], routes[i] = r.ItemKey, r.Route
		domains[i], statuses[i], checks[i], classes[i] = nullable(r.EmailDomain), nullable(r.Status), nullable(r.FailedCheck), nullable(r.ErrorClass)
		if r.Snapshot != nil {
			snaps[i] = nullable(string(r.Snapshot))
		}
		times[i] = r.OccurredAt
		if times[i].IsZero() {
			times[i] = time.Now()
		}
		billable[i], quotaBit[i] = r.Billable, r.QuotaUnit
	}
	_, err := db.Exec(ctx, `
		WITH ins AS (
			INSERT INTO usage_log (account_id, key_id, item_key, occurred_at, route, email_domain,
				status, failed_check, error_class, billable, quota_unit, snapshot)
			SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[],
				$6::text[], $7::text[], $8::text[], $9::text[], $10::bool[], $11::bool[], $12::jsonb[])
			ON CONFLICT (item_key) DO NOTHING
			RETURNING account_id, (occurred_at AT TIME ZONE 'UTC') AS at, billable
		), daily AS (
			INSERT INTO usage_daily AS d (account_id, day, billable)
			SELECT account_id, at::date, count(*) FROM ins WHERE billable GROUP BY 1, 2
			ON CONFLICT (account_id, day) DO UPDATE SET billable = d.billable + EXCLUDED.billable
		)
		INSERT INTO usage_monthly AS m (account_id, month, billable)
		SELECT account_id, date_trunc('month', at)::date, count(*) FROM ins WHERE billable GROUP BY 1, 2
		ON CONFLICT (account_id, month) DO UPDATE SET billable = m.billable + EXCLUDED.billable`,
		accounts, keys, items, times, routes, domains, statuses, checks, classes, billable, quotaBit, snaps)
	return err
}
