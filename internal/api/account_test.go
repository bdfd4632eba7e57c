package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

func TestGetAccount(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC)
	b := setup(t, map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS":         "750",
		"MAILVET_PLAN_BUILDER_RATE_LIMIT_PER_MIN": "120",
	}, func(d *Deps) { d.Now = func() time.Time { return now } })

	free, freeKey := b.account(plan.Free, "")
	usagetest.SetMonth(t, b.pool, free.ID, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), 37, 30)
	usagetest.SetMonth(t, b.pool, free.ID, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), 500, 480)
	r := b.call(http.MethodGet, "/v1/management/account", freeKey, nil).want(t, 200, "")
	want := map[string]any{
		"account_id": free.ID, "tier": "free", "subscription_status": "none", "cancel_at_period_end": false,
		"current_period_end": nil, "canceled_at": nil, "cancel_at": nil, "trial_start": nil, "trial_end": nil,
		"billing_cycle_anchor": nil, "usage_this_month": float64(37),
	}
	for k, v := range want {
		if r.body[k] != v {
			t.Errorf("%s = %v, want %v", k, r.body[k], v)
		}
	}
	limits := r.body["limits"].(map[string]any)
	if limits["monthly_calls"] != float64(750) || limits["rate_limit_per_min"] != float64(10) || limits["max_keys"] != float64(2) {
		t.Errorf("free limits %v: MAILVET_PLAN_* must override the default limits", limits)
	}

	// A paid account with every lifecycle field set, as the Stripe webhook leaves it.
	paid, paidKey := b.account(plan.Builder, "cus_paid")
	pgtest.Exec(t, b.pool, `UPDATE accounts SET subscription_status = 'trialing', current_period_end = '2026-12-01T00:00:00Z',
		cancel_at_period_end = true, canceled_at = '2026-11-20T10:00:00.123Z', cancel_at = '2026-12-01T00:00:00Z',
		trial_start = '2026-11-01T00:00:00Z', trial_end = '2026-11-15T00:00:00Z', billing_cycle_anchor = '2026-11-01T00:00:00Z'
		WHERE id = $1`, paid.ID)
	// A paid account that was free earlier in the month: 448 quota units from its free days, 3,596
	// billable verifications. usage_this_month is the summary's calls_used, the billable count
	// (issue 32: the account said 448 and the summary 3,596).
	usagetest.SetMonth(t, b.pool, paid.ID, now, 448, 3596)
	r = b.call(http.MethodGet, "/v1/management/account", paidKey, nil).want(t, 200, "")
	if r.body["tier"] != "builder" || r.body["subscription_status"] != "trialing" || r.body["cancel_at_period_end"] != true ||
		r.body["usage_this_month"] != float64(3596) {
		t.Errorf("paid account: %s", r.raw)
	}
	for _, acct := range []struct{ key, tier string }{{freeKey, "free"}, {paidKey, "builder"}} {
		account := b.call(http.MethodGet, "/v1/management/account", acct.key, nil).want(t, 200, "").body["usage_this_month"]
		summary := b.call(http.MethodGet, "/v1/management/usage/summary", acct.key, nil).want(t, 200, "").body["calls_used"]
		if account != summary {
			t.Errorf("%s: usage_this_month %v, summary calls_used %v: one definition, one number", acct.tier, account, summary)
		}
	}
	for _, f := range []string{"current_period_end", "canceled_at", "cancel_at", "trial_start", "trial_end", "billing_cycle_anchor"} {
		isoUTC(t, r.body[f])
	}
	if r.body["canceled_at"] != "2026-11-20T10:00:00Z" {
		t.Errorf("canceled_at = %v", r.body["canceled_at"])
	}
	if l := r.body["limits"].(map[string]any); l["rate_limit_per_min"] != float64(120) || l["monthly_calls"] != float64(5000) {
		t.Errorf("builder limits %v", l)
	}
}

// The configuration is the one source of the plans: a limit set by MAILVET_PLAN_* is what the
// account shows, what the key list reports as max, and what key creation enforces.
func TestPlansFollowTheConfiguration(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"MAILVET_PLAN_FREE_MAX_KEYS": "3"})
	a, mgmt := b.account(plan.Free, "")
	l := b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, 200, "").body["limits"].(map[string]any)
	if l["max_keys"] != float64(3) {
		t.Fatalf("account limits %v, want max_keys 3", l)
	}
	for i := range 3 {
		b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": fmt.Sprint("k", i)}).want(t, 201, "")
	}
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "one too many"}).want(t, 429, CodeKeyLimitReached)
	if got := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "").body["max"]; got != float64(3) {
		t.Errorf("key list max %v, want 3", got)
	}
	_ = a
}

func TestDatastoreFailureIsDatastoreError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, key := b.account(plan.Free, "")
	// Authentication still works, but the account's usage cannot be read.
	pgtest.Exec(t, b.pool, `ALTER TABLE usage_monthly RENAME TO usage_monthly_gone`)
	b.call(http.MethodGet, "/v1/management/account", key, nil).want(t, 500, CodeDatastore)
}
