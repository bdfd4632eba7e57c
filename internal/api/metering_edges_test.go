package api

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
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

// Two API replicas, each with its own pool and admission groups, take 60 requests of two accounts
// at once: a paid account 4 emails short of its hard spend cap sends single verifications, a free
// one 6 units short of its quota sends batches of 2. Exactly 4 and 3 are admitted, every other
// answer is the refusal (no 500, no deadlock between the replicas' groups), and once the holds
// have settled the month's counts are exactly at the cap and the quota (docs/reliability.md,
// "Metering guarantees").
func TestCapAndQuotaAreExactAcrossReplicasAtOnce(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000",
		"MAILVET_PLAN_BUILDER_MONTHLY_CALLS": "5", "MAILVET_OVERAGE_EUR_BUILDER": "1"}})
	paid, paidKey := b.customer(plan.Builder)
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 4 WHERE id = $1`, paid)
	usagetest.SetMonth(t, b.pool, paid, time.Now(), 0, 5)
	free, freeKey := b.customer(plan.Free)
	usagetest.SetMonth(t, b.pool, free, time.Now(), 494, 0)
	second := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "replica2"), Pool: pgtest.Pool(t, b.pool.Config().ConnString()),
		NATS: b.srv.nc, JS: b.js, Local: b.engine, Ready: b.srv.ready})
	t.Cleanup(second.Close)
	replicas := []http.Handler{b.srv.Handler(), second.Handler()}

	type outcome struct {
		free   bool
		status int
		code   string
	}
	const n = 60
	out := make(chan outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Disposable and syntax-failing addresses are decided by the API: billable on the
			// paid account, quota units on the free one, with no fleet in the way.
			path, key, body := "/v1/email/verify", paidKey, fmt.Sprintf(`{"email":"u%d@mailinator.com"}`, i)
			if i%3 == 0 {
				path, key, body = "/v1/email/verify/batch", freeKey, fmt.Sprintf(`{"emails":["bad%d","bad%d-2"]}`, i, i)
			}
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			<-start
			resp, raw := serve(replicas[i%2], req)
			code := ""
			if resp.StatusCode != http.StatusOK {
				code = string(raw)
			}
			out <- outcome{free: key == freeKey, status: resp.StatusCode, code: code}
		}()
	}
	close(start)
	wg.Wait()
	close(out)
	got := map[string]int{}
	for o := range out {
		who := "paid"
		if o.free {
			who = "free"
		}
		got[fmt.Sprintf("%s %d", who, o.status)]++
		if o.status != http.StatusOK && o.status != http.StatusPaymentRequired && o.status != http.StatusTooManyRequests {
			t.Errorf("%s: %d %s", who, o.status, o.code)
		}
	}
	want := map[string]int{"paid 200": 4, "paid 402": 36, "free 200": 3, "free 429": 17}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	b.settle()
	if c := usagetest.Of(t, b.pool, paid); c.Billable != 9 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("paid counts %+v, want 9 billable (5 included + the cap's 4), nothing held", c)
	}
	if c := usagetest.Of(t, b.pool, free); c.Quota != 500 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("free counts %+v, want the whole quota of 500 used, nothing held", c)
	}
}

// A tier change in the middle of a month, written as the Stripe webhook writes it, applies from
// the next request: its rate limit (in the same minute's window), its included volume, overage
// price and spend cap. The month's billable count is read against the tier the account has when
// it is read (docs/api.md, "Metering"): an upgrade absorbs overage already run up, a downgrade
// shows it at once. Back on free, the quota counts the month's free-tier units, not what was
// billed on the paid plan.
func TestTierChangeAppliesFromTheNextRequest(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{now: time.Now(), env: map[string]string{ // one rate window throughout
		"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "2", "MAILVET_PLAN_FREE_MONTHLY_CALLS": "5",
		"MAILVET_PLAN_BUILDER_MONTHLY_CALLS": "10", "MAILVET_OVERAGE_EUR_BUILDER": "1",
		"MAILVET_PLAN_SCALE_MONTHLY_CALLS": "20", "MAILVET_OVERAGE_EUR_SCALE": "0.5"}})
	acct, key := b.customer(plan.Free)
	mgmt := b.provisioningKey(acct)
	i := 0
	send := func(status int, code, limit string) reply {
		t.Helper()
		i++
		r := b.verify(key, map[string]string{"email": fmt.Sprintf("u%d@mailinator.com", i)}).want(t, status, code)
		if r.header.Get("RateLimit-Limit") != limit {
			t.Errorf("request %d: RateLimit-Limit %q, want %s", i, r.header.Get("RateLimit-Limit"), limit)
		}
		return r
	}
	tier := func(t plan.Tier) {
		pgtest.Exec(b.t, b.pool, `UPDATE accounts SET tier = $2, subscription_status = 'active', updated_at = now() WHERE id = $1`, acct, string(t))
	}
	summary := func(used, included, remaining, over int, cost float64) {
		t.Helper()
		b.settle()
		s := b.call(http.MethodGet, "/v1/management/usage/summary", mgmt, nil).want(t, http.StatusOK, "").body
		want := map[string]any{"calls_used": float64(used), "calls_included": float64(included), "calls_remaining": float64(remaining),
			"overage_calls": float64(over), "estimated_cost_eur": cost}
		for k, v := range want {
			if s[k] != v {
				t.Errorf("summary on %v: %s = %v, want %v (%v)", s["tier"], k, s[k], v, s)
			}
		}
	}

	send(200, "", "2")
	send(200, "", "2")
	send(http.StatusTooManyRequests, CodeRateLimitExceeded, "2")
	summary(2, 5, 3, 0, 0)

	tier(plan.Builder)
	if r := send(200, "", "100"); r.header.Get("RateLimit-Remaining") != "97" {
		t.Errorf("upgraded in the same minute: RateLimit-Remaining %q, want 97 (3 of the window's 100 used)", r.header.Get("RateLimit-Remaining"))
	}
	summary(3, 10, 7, 0, 0) // the billable verifications of the free days count too
	usagetest.SetMonth(t, b.pool, acct, time.Now(), 2, 12)
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 3 WHERE id = $1`, acct) // builder: room for 13
	summary(12, 10, 0, 2, 2)
	send(200, "", "100")
	send(http.StatusPaymentRequired, CodePaymentRequired, "100")

	tier(plan.Scale) // 20 included at EUR 0.5: the cap of EUR 3 leaves room for 26 − 13
	summary(13, 20, 7, 0, 0)
	send(200, "", "1000")
	tier(plan.Builder) // the overage comes back, and the cap is full again
	summary(14, 10, 0, 4, 4)
	send(http.StatusPaymentRequired, CodePaymentRequired, "100")

	tier(plan.Free) // the 2 free-day units; the window's 7 units are past free's 2 a minute
	summary(2, 5, 3, 0, 0)
	send(http.StatusTooManyRequests, CodeRateLimitExceeded, "2")
}

// A batch or stream is admitted for its worst case, all of its emails, or refused whole
// (docs/api.md, "Metering"): with 50 left of the free quota, or room for 50 under a spend cap, a
// batch or stream of 100 is refused with nothing held or charged, and one of 50 passes.
func TestListLargerThanTheRoomIsRefusedWhole(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000",
		"MAILVET_PLAN_BUILDER_RATE_LIMIT_PER_MIN": "1000", "MAILVET_OVERAGE_EUR_BUILDER": "1"}})
	emails := func(n int, format string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i)
		}
		return out
	}
	free, freeKey := b.customer(plan.Free)
	usagetest.SetMonth(t, b.pool, free, time.Now(), 450, 0)
	paid, paidKey := b.customer(plan.Builder)
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 50 WHERE id = $1`, paid)
	usagetest.SetMonth(t, b.pool, paid, time.Now(), 0, 5000)

	for _, route := range []string{"/v1/email/verify/batch", "/v1/email/verify/stream"} {
		r := b.call(http.MethodPost, route, freeKey, map[string]any{"emails": emails(100, "bad%d")}).
			want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
		if m, _ := r.body["message"].(string); !strings.Contains(m, "needs 100 verifications; 50 of the monthly quota of 500 are left") {
			t.Errorf("free %s: message %q", route, m)
		}
		r = b.call(http.MethodPost, route, paidKey, map[string]any{"emails": emails(100, "u%d@mailinator.com")}).
			want(t, http.StatusPaymentRequired, CodePaymentRequired)
		if r.body["room"] != float64(50) {
			t.Errorf("paid %s: room %v, want 50", route, r.body["room"])
		}
	}
	if c := b.usage(free); c.Quota != 450 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("free after the refusals: %+v, want nothing held or charged", c)
	}
	if c := b.usage(paid); c.Billable != 5000 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("paid after the refusals: %+v, want nothing held or charged", c)
	}
	b.call(http.MethodPost, "/v1/email/verify/batch", freeKey, map[string]any{"emails": emails(50, "bad%d")}).want(t, http.StatusOK, "")
	b.call(http.MethodPost, "/v1/email/verify/batch", paidKey, map[string]any{"emails": emails(50, "u%d@mailinator.com")}).want(t, http.StatusOK, "")
	if c := b.usage(free); c.Quota != 500 || c.Held != 0 {
		t.Errorf("free after the batch of 50: %+v, want the quota's 500", c)
	}
	if c := b.usage(paid); c.Billable != 5050 || c.Held != 0 {
		t.Errorf("paid after the batch of 50: %+v, want 5,050 billable", c)
	}
}
