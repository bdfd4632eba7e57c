package api

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// The last seconds of November on the API's clock: the refusals' reset_at, Retry-After and
// RateLimit-Reset all name the instant the request really passes again, counted from the same
// clock, and a retry at that instant passes (docs/api.md, "Headers"). Just before it, it is still
// refused.
func TestRefusalsResetWhenTheRequestPassesAgain(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Date(2026, 11, 30, 23, 59, 58, 400_000_000, time.UTC))
	b := setupVerify(t, verifyOpts{clock: clock.Now, env: map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS": "5", "MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "3"}})
	acct, key := b.customer(plan.Free)
	usagetest.SetMonth(t, b.pool, acct, clock.Now(), 4, 0)
	midnight := "2026-12-01T00:00:00Z"
	refused := func(code string, retryAfter string, remaining string) {
		t.Helper()
		r := b.verify(key, map[string]string{"email": "not-an-address"}).want(t, http.StatusTooManyRequests, code)
		h := r.header
		if r.body["reset_at"] != midnight || h.Get("Retry-After") != retryAfter || h.Get("RateLimit-Reset") != retryAfter ||
			h.Get("RateLimit-Remaining") != remaining {
			t.Errorf("%s at %v: reset_at %v, Retry-After %q, RateLimit-Reset %q, RateLimit-Remaining %q; want %s, %s, %s, %s",
				code, clock.Now().Format("15:04:05.0"), r.body["reset_at"], h.Get("Retry-After"), h.Get("RateLimit-Reset"),
				h.Get("RateLimit-Remaining"), midnight, retryAfter, retryAfter, remaining)
		}
	}

	b.verify(key, map[string]string{"email": "not-an-address"}).want(t, http.StatusOK, "") // the 5th unit
	refused(CodeMonthlyQuotaExceeded, "2", "1")                                            // 1.6 s to midnight
	refused(CodeMonthlyQuotaExceeded, "2", "0")                                            // its rate unit is spent
	refused(CodeRateLimitExceeded, "2", "0")
	clock.Add(1500 * time.Millisecond) // 23:59:59.9
	refused(CodeRateLimitExceeded, "1", "0")
	clock.Add(100 * time.Millisecond) // midnight: a new minute and a new month
	r := b.verify(key, map[string]string{"email": "not-an-address"}).want(t, http.StatusOK, "")
	if r.header.Get("RateLimit-Remaining") != "2" || r.header.Get("RateLimit-Reset") != "60" {
		t.Errorf("at midnight: RateLimit-Remaining %q, RateLimit-Reset %q; want 2, 60",
			r.header.Get("RateLimit-Remaining"), r.header.Get("RateLimit-Reset"))
	}
	b.settle()
	mgmt := b.provisioningKey(acct)
	sum := b.call(http.MethodGet, "/v1/management/usage/summary", mgmt, nil).want(t, http.StatusOK, "").body
	if sum["calls_used"] != float64(1) || sum["calls_remaining"] != float64(4) || sum["overage_calls"] != float64(0) {
		t.Errorf("December's summary %v, want 1 used and 4 left", sum)
	}
	if s, _ := strconv.Atoi(r.header.Get("RateLimit-Limit")); s != 3 {
		t.Errorf("RateLimit-Limit %q", r.header.Get("RateLimit-Limit"))
	}
}
