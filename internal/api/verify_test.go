package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// verifyBundle is an API server with everything the verify routes need, all real: Postgres, an
// embedded NATS server, a mail world on loopback, and (unless noWorkers) a verifier worker.
type verifyBundle struct {
	*testBundle
	mail    *mailsim.World
	natsURL string
	js      jetstream.JetStream
	// natsProxy is between the API and NATS when verifyOpts.proxyNATS is set.
	natsProxy *tcpproxy.Proxy
	engine    *verify.Verifier
}

type verifyOpts struct {
	env       map[string]string
	noWorkers bool
	now       time.Time        // when set, the API's clock stands still here
	clock     func() time.Time // when set, the API's clock (a testclock the test moves)
	// proxyNATS connects the API to NATS through a TCP proxy (verifyBundle.natsProxy) that fault
	// tests cut, with the production connection options (queue.Connect).
	proxyNATS bool
}

func setupVerify(t testing.TB, o verifyOpts) *verifyBundle {
	t.Helper()
	mail, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mail.Close)
	if _, err := mail.AddServer(mailsim.ServerOptions{Name: "mx.acme.test"}); err != nil {
		t.Fatal(err)
	}
	// The slow domain has a mail server of its own: on a shared one its RCPT could be pipelined
	// with others', which would hold their replies back too.
	if _, err := mail.AddServer(mailsim.ServerOptions{Name: "mx.slow.test"}); err != nil {
		t.Fatal(err)
	}
	mx := []mailsim.MX{{Pref: 10, Host: "mx.acme.test"}}
	mail.AddDomain("acme.test", mailsim.Domain{MX: mx, Users: []string{"ann", "bob", "info"}})
	mail.AddDomain("slow.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.slow.test"}}, Users: []string{"sue"}, RcptDelay: 700 * time.Millisecond})
	mail.AddDomain("nomx.test", mailsim.Domain{NullMX: true})

	env := map[string]string{
		"MAILVET_DNS_RESOLVER": mail.DNSAddr(), "MAILVET_SMTP_PORT": fmt.Sprint(mail.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS": mailsim.Prefix.String(), // the world's MX hosts are on 127.0.0.x
	}
	for k, v := range o.env {
		env[k] = v
	}
	srv := natstest.Server(t)
	b := &verifyBundle{mail: mail, natsURL: srv.ClientURL()}
	apiURL := srv.ClientURL()
	if o.proxyNATS {
		if b.natsProxy, err = tcpproxy.Start(strings.TrimPrefix(apiURL, "nats://")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.natsProxy.Close() })
		apiURL = "nats://" + b.natsProxy.Addr()
	}
	nc, err := queue.Connect(apiURL, "api-under-test", queue.Auth{}, app.NewLogger(io.Discard, "api-nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	b.js = js
	b.testBundle = setup(t, env, func(d *Deps) {
		cfg := d.Config
		b.engine, err = verify.New(engineConfig(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.engine.Close)
		d.NATS, d.JS, d.Local = nc, js, b.engine
		if !o.now.IsZero() {
			d.Now = func() time.Time { return o.now }
		}
		if o.clock != nil {
			d.Now = o.clock
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	if !o.noWorkers {
		b.startWorker(t)
	}
	return b
}

// startWorker runs a verifier worker (sync, batch and jobs) on its own NATS connection.
func (b *verifyBundle) startWorker(t testing.TB) {
	t.Helper()
	startVerifier(t, b.pool, b.natsURL, b.engine, b.srv)
}

// startVerifier runs a verifier worker (verifyworker.Services: sync, batch items and jobs) with pipe
// on its own NATS connection, like a separate process, and waits until srv sees it pulling work.
func startVerifier(tb testing.TB, pool *pgxpool.Pool, natsURL string, pipe verifyworker.Pipeline, srv *Server) {
	tb.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		tb.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range verifyworker.Services(verifyworker.Deps{Pool: pool, NATS: nc, JS: js, Pipe: pipe, Log: app.NewLogger(io.Discard, "worker")}) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	tb.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !srv.dispatch.WorkersAlive(context.Background()) {
		if time.Now().After(deadline) {
			tb.Fatal("verifier worker did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// customer makes an account of tier with a standard key and returns the account id and key.
func (b *verifyBundle) customer(tier plan.Tier) (string, string) {
	b.t.Helper()
	a, _ := b.account(tier, "")
	return a.ID, b.standardKey(a.ID).Raw
}

func (b *verifyBundle) verify(key string, body any) reply {
	b.t.Helper()
	return b.call(http.MethodPost, "/v1/email/verify", key, body)
}

func (b *verifyBundle) count(sql string, args ...any) int {
	b.t.Helper()
	b.srv.rejections.Flush()      // rejection rows are written behind their responses
	usagetest.Settle(b.t, b.pool) // so are the rows of delivered results
	var n int
	pgtest.Must(b.t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

func TestVerifySyncOutcomesAndUsage(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)

	cases := []struct {
		email, status, failed string
		valid                 bool
	}{
		{"ann@acme.test", "deliverable", "", true},
		{"nobody@acme.test", "undeliverable", "smtp", false},
		{"not-an-address", "invalid", "syntax", false},
		{"x@mailinator.com", "invalid", "disposable", false},
		{"ann@nomx.test", "invalid", "no_mx", false},
	}
	for _, c := range cases {
		r := b.verify(key, map[string]string{"email": c.email}).want(t, http.StatusOK, "")
		if r.body["status"] != c.status || r.body["valid"] != c.valid {
			t.Errorf("%s: %v", c.email, r.body)
		}
		if got, _ := r.body["failed_check"].(string); got != c.failed {
			t.Errorf("%s: failed_check %q, want %q", c.email, got, c.failed)
		}
		if r.header.Get("RateLimit-Limit") != "10" || r.header.Get("RateLimit-Remaining") == "" || r.header.Get("RateLimit-Reset") == "" {
			t.Errorf("%s: RateLimit headers %v", c.email, r.header)
		}
	}
	ok := b.verify(key, map[string]string{"email": "ann@acme.test"}).body
	if ok["mx_host"] != "mx.acme.test" || ok["mx_found"] != true || ok["confidence"] != 0.95 {
		t.Errorf("deliverable result %v", ok)
	}
	if lat, _ := ok["latency_ms"].(float64); lat <= 0 {
		t.Errorf("latency_ms %v", ok["latency_ms"])
	}

	// Six emails entered verification: six quota units, six log rows with a null error_class;
	// five passed layer 1 and are billable (docs/api.md, "Metering").
	if n := b.rows(acct, usagetest.Delivered); n != 6 {
		t.Errorf("usage rows %d, want 6", n)
	}
	// Every row has its result's outcome and the snapshot the client got.
	for _, c := range append(cases, cases[0]) {
		if n := b.rows(acct, func(r usagetest.Row) bool {
			return r.EmailDomain == domainPart(c.email) && r.Status == c.status && r.FailedCheck == c.failed && r.Email == c.email
		}); n < 1 {
			t.Errorf("%s: no usage row with status %s and its snapshot", c.email, c.status)
		}
	}
	mgmt := b.provisioningKey(acct)
	days := b.call(http.MethodGet, "/v1/management/usage", mgmt, nil).want(t, 200, "").body["days"].([]any)
	if len(days) != 30 || days[29].(map[string]any)["calls"] != float64(5) {
		t.Errorf("usage days: %d entries, today %v", len(days), days[len(days)-1])
	}
	sum := b.call(http.MethodGet, "/v1/management/usage/summary", mgmt, nil).want(t, 200, "").body
	if sum["calls_used"] != float64(6) || sum["calls_remaining"] != float64(494) || sum["tier"] != "free" {
		t.Errorf("summary %v", sum)
	}
	accountView := b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, 200, "").body
	if accountView["usage_this_month"] != float64(6) {
		t.Errorf("usage_this_month %v", accountView["usage_this_month"])
	}
}

// provisioningKey issues a fresh provisioning key for acct (revoking the fixture's).
func (b *verifyBundle) provisioningKey(acct string) string {
	b.t.Helper()
	_, err := b.pool.Exec(context.Background(), `UPDATE api_keys SET revoked_at = now() WHERE account_id = $1 AND kind = 'provisioning'`, acct)
	pgtest.Must(b.t, err, "revoke")
	k, err := b.store.CreateProvisioningKey(context.Background(), acct)
	pgtest.Must(b.t, err, "provisioning key")
	return k.Raw
}

func TestVerifyBadInput(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	long := strings.Repeat("a", 1100) + "@acme.test"
	cases := []struct {
		path, body, field string
	}{
		{"/v1/email/verify", `{"email":`, "JSON"},
		{"/v1/email/verify", `{}`, "email"},
		{"/v1/email/verify", `{"email": 42}`, "email"},
		{"/v1/email/verify", `{"email": "  "}`, "email"},
		{"/v1/email/verify", `{"email": "` + long + `"}`, "email"},
		{"/v1/email/verify", `{"email": "a@acme.test", "emial": 1}`, "emial"},
		{"/v1/email/verify", `["a@acme.test"]`, "object"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_url": "http://hooks.example.com/x"}`, "webhook_url"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_url": "https://203.0.113.7/x"}`, "webhook_url"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_url": "https://user:pw@hooks.example.com/x"}`, "webhook_url"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_url": "https://localhost/x"}`, "webhook_url"},
		{"/v1/email/verify", `{"email": "a@acme.test", "callback_url": "https://printer.local/x"}`, "webhook_url"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_secret": "short"}`, "webhook_secret"},
		{"/v1/email/verify", `{"email": "a@acme.test", "webhook_secret": "long enough secret"}`, "webhook_secret"},
		{"/v1/email/verify/batch", `{"emails": []}`, "emails"},
		{"/v1/email/verify/batch", `{"emails": "a@acme.test"}`, "emails"},
		{"/v1/email/verify/batch", `{"emails": ["a@acme.test", 7]}`, "emails[1]"},
		{"/v1/email/verify/batch", `{"emails": [` + strings.Repeat(`"a@acme.test",`, 100) + `"a@acme.test"]}`, "emails"},
		{"/v1/email/verify/stream", `{"emails": [` + strings.Repeat(`"a@acme.test",`, 1000) + `"a@acme.test"]}`, "emails"},
		{"/v1/email/verify/stream", `{}`, "emails"},
	}
	for _, c := range cases {
		r := b.call(http.MethodPost, c.path, key, c.body).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, c.field) {
			t.Errorf("%s %s: message %q does not name %s", c.path, c.body[:min(len(c.body), 60)], msg, c.field)
		}
	}
	r := b.call(http.MethodPost, "/v1/email/verify", key, `{"email":"a@acme.test"}`, "Content-Type", "text/plain")
	r.want(t, http.StatusBadRequest, CodeInvalidRequest)

	// Refused requests cost nothing and are logged with their class (docs/errors.md).
	if used := b.usage(acct).Quota; used != 0 {
		t.Errorf("bad requests charged %d quota units", used)
	}
	if n := b.rows(acct, usagetest.Refused("invalid_request")); n != len(cases)+1 {
		t.Errorf("logged %d invalid_request rows, want %d", n, len(cases)+1)
	}
}

func TestVerifyBodyGuard(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Free)
	big := `{"email":"` + strings.Repeat("a", 2<<20) + `"}`
	b.call(http.MethodPost, "/v1/email/verify", key, big).want(t, http.StatusRequestEntityTooLarge, CodePayloadTooLarge)
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free) // 10 per minute
	emails := []string{"a@x", "b@x", "c@x", "d@x", "e@x", "f@x", "g@x", "h@x"}
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).want(t, 200, "")
	// A batch of n needs n units: 3 more do not fit in the 2 left.
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails[:3]}).
		want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	if r.body["limit"] != float64(10) || r.body["window"] != "1m" {
		t.Errorf("body %v", r.body)
	}
	reset := isoUTC(t, r.body["reset_at"])
	if d := time.Until(reset); d <= 0 || d > 61*time.Second {
		t.Errorf("reset_at %v is not within the next minute", reset)
	}
	// The 2 left are still there: a smaller request would pass.
	if r.header.Get("Retry-After") == "" || r.header.Get("RateLimit-Remaining") != "2" {
		t.Errorf("headers %v, want RateLimit-Remaining 2", r.header)
	}
	if a, _ := r.body["action"].(string); !strings.HasPrefix(a, "Wait until reset_at") {
		t.Errorf("action %q", a)
	}
	// A batch larger than a whole minute allows can never pass: the action says to split it.
	eleven := append(append([]string{}, emails...), "i@x", "j@x", "k@x")
	r = b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": eleven}).
		want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	if a, _ := r.body["action"].(string); !strings.Contains(a, "Split the request into requests of at most 10 emails") {
		t.Errorf("action for 11 emails against 10 a minute: %q", a)
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q on a batch that can never pass", ra)
	}
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.ErrorClass == "rate_limit" && r.Route == "verify_batch" }); n != 2 {
		t.Errorf("rate_limit rows %d", n)
	}
	if used := b.usage(acct).Quota; used != 8 {
		t.Errorf("quota %d, want 8: a rate-limited request is not counted", used)
	}
}

// Every verify response to an authenticated caller carries the RateLimit-* headers, also a
// refusal that came before admission (bad input): the window it describes is the one admission
// counts in, untouched by the refusal.
func TestEveryVerifyResponseCarriesRateLimitHeaders(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{now: time.Now()}) // the clock stands still: one window
	_, key := b.customer(plan.Free)                  // 10 per minute
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"a@x", "b@x", "c@x"}}).want(t, 200, "")
	for _, c := range []struct {
		what, path string
		body       any
	}{
		{"verify without email", "/v1/email/verify", map[string]any{}},
		{"verify with a bad webhook_url", "/v1/email/verify", map[string]any{"email": "ann@acme.test", "webhook_url": "ftp://x"}},
		{"empty batch", "/v1/email/verify/batch", map[string]any{"emails": []string{}}},
		{"stream with an unknown field", "/v1/email/verify/stream", map[string]any{"emails": []string{"a@x"}, "mails": 1}},
	} {
		r := b.call(http.MethodPost, c.path, key, c.body).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if r.header.Get("RateLimit-Limit") != "10" || r.header.Get("RateLimit-Remaining") != "7" {
			t.Errorf("%s: RateLimit headers %v, want limit 10, 7 remaining", c.what, r.header)
		}
		if s, err := strconv.Atoi(r.header.Get("RateLimit-Reset")); err != nil || s < 1 || s > 60 {
			t.Errorf("%s: RateLimit-Reset %q, want 1 to 60 seconds", c.what, r.header.Get("RateLimit-Reset"))
		}
	}
	// Nothing refused above took a unit of the window.
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"d@x", "e@x", "f@x", "g@x", "h@x", "i@x", "j@x"}}).want(t, 200, "")
}

func TestMonthlyQuota(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS": "5", "MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	acct, key := b.customer(plan.Free)
	// Larger than the whole quota: it can never pass on this plan, so no Retry-After.
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"a@x", "b@x", "c@x", "d@x", "e@x", "f@x"}}).
		want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
	if a, _ := r.body["action"].(string); !strings.Contains(a, "at most 5 emails") || r.header.Get("Retry-After") != "" {
		t.Errorf("a batch of 6 against a quota of 5: action %q, Retry-After %q", a, r.header.Get("Retry-After"))
	}
	for i := range 3 {
		b.verify(key, map[string]string{"email": fmt.Sprintf("bad%d", i)}).want(t, 200, "")
	}
	// Not reached yet: a batch larger than what is left is told so, and what is left.
	r = b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"a@x", "b@x", "c@x"}}).
		want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
	if m, _ := r.body["message"].(string); !strings.Contains(m, "needs 3 verifications; 2 of the monthly quota of 5 are left") {
		t.Errorf("message %q", m)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a batch that fits next month")
	}
	for i := 3; i < 5; i++ {
		b.verify(key, map[string]string{"email": fmt.Sprintf("bad%d", i)}).want(t, 200, "")
	}
	r = b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
	if m, _ := r.body["message"].(string); r.body["limit"] != float64(5) || r.body["used"] != float64(5) || !strings.Contains(m, "reached") {
		t.Errorf("body %v", r.body)
	}
	now := time.Now().UTC()
	if want := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC); !isoUTC(t, r.body["reset_at"]).Equal(want) {
		t.Errorf("reset_at %v, want %v", r.body["reset_at"], want)
	}
	if n := b.rows(acct, usagetest.Refused("monthly_quota_exceeded")); n != 3 {
		t.Errorf("monthly_quota_exceeded rows %d", n)
	}
}

// 20 concurrent requests against 5 remaining units, through two API replicas: exactly 5 pass.
func TestQuotaAdmissionAcrossReplicas(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	acct, key := b.customer(plan.Free)
	usagetest.SetMonth(t, b.pool, acct, time.Now(), 495, 0)
	second := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "replica2"), Pool: pgtest.Pool(t, b.pool.Config().ConnString()),
		NATS: b.srv.nc, JS: b.js, Local: b.engine, Ready: b.srv.ready})
	replicas := []http.Handler{b.srv.Handler(), second.Handler()}
	codes := make(chan int, 20)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, "/v1/email/verify", strings.NewReader(`{"email":"not-an-address"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, _ := serve(replicas[i%2], req)
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[200] != 5 || got[429] != 15 {
		t.Fatalf("status counts %v, want 5×200 and 15×429", got)
	}
}

func TestSpendCap(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 0.01 WHERE id = $1`, acct)
	usagetest.SetMonth(t, b.pool, acct, time.Now(), 0, 5000)
	// 2 more billable calls would cost 0.008 EUR: within the 0.01 cap. The worst case of 3 is not.
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"a@x", "b@x"}}).want(t, 200, "")
	// Its hold is released behind the response: until then its 2 emails still count as held.
	b.settle()
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"a@x", "b@x", "c@x"}}).
		want(t, http.StatusPaymentRequired, CodePaymentRequired)
	if r.body["hard_cap_eur"] != 0.01 || r.body["current_overage_eur"] != float64(0) {
		t.Errorf("body %v", r.body)
	}
	// The room left under the cap, and the numbers in the message and the action (issue: a 402
	// that did not say how much more would pass): 0.01 EUR allows 2 emails at 0.004 beyond the
	// included 5,000, less those the batch before billed.
	c := usagetest.Of(t, b.pool, acct)
	room := float64(5000 + 2 - c.Billable - c.Held)
	if r.body["room"] != room || r.body["reset_at"] != usage.MonthStart(time.Now()).AddDate(0, 1, 0).Format(time.RFC3339) {
		t.Errorf("room and reset_at: %v, want room %v (counts %+v)", r.body, room, c)
	}
	if msg := r.body["message"].(string); !strings.Contains(msg, "EUR 0.01") || !strings.Contains(msg, fmt.Sprintf("room for %v more", room)) {
		t.Errorf("message %q", msg)
	}
	// A cap with room for some but not all: the action says how many to send.
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 0.02 WHERE id = $1`, acct) // the cap is kept to the cent
	emails := []string{"a@x", "b@x", "c@x", "d@x", "e@x", "f@x"}
	r = b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).
		want(t, http.StatusPaymentRequired, CodePaymentRequired)
	room += 3
	if r.body["room"] != room || !strings.Contains(r.body["action"].(string), fmt.Sprintf("Send at most %v emails", room)) {
		t.Errorf("room %v, want %v; action %q", r.body["room"], room, r.body["action"])
	}
	if n := b.rows(acct, usagetest.Refused("payment_required")); n != 2 {
		t.Errorf("payment_required rows %d", n)
	}
}

// A batch admitted while another is still being verified counts the other's emails as held: with
// room for 3 billable emails under the cap, a 2-email batch still running (a slow mail server)
// leaves room for 1, not 3. Once the first batch is answered its emails are billed, no longer
// held.
func TestBatchesRunningAtOnceKeepToTheSpendCap(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{
		"MAILVET_PLAN_BUILDER_MONTHLY_CALLS": "5", "MAILVET_OVERAGE_EUR_BUILDER": "1"}})
	acct, key := b.customer(plan.Builder)
	pgtest.Exec(t, b.pool, `UPDATE accounts SET hard_cap_eur = 3 WHERE id = $1`, acct) // 3 beyond the included 5
	usagetest.SetMonth(t, b.pool, acct, time.Now(), 0, 5)

	slow := make(chan reply, 1)
	go func() {
		slow <- b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"sue@slow.test", "ann@acme.test"}})
	}()
	wait.For(t, 15*time.Second, "the slow batch's hold", func() bool { return usagetest.Of(t, b.pool, acct).Held == 2 })
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"bob@acme.test", "info@acme.test"}}).
		want(t, http.StatusPaymentRequired, CodePaymentRequired)
	if r := <-slow; r.status != http.StatusOK {
		t.Fatalf("the slow batch: %d %s", r.status, r.raw)
	}
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"bob@acme.test"}}).want(t, http.StatusOK, "")
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"info@acme.test"}}).
		want(t, http.StatusPaymentRequired, CodePaymentRequired)
	usagetest.Settle(t, b.pool)
	if c := usagetest.Of(t, b.pool, acct); c.Billable != 8 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want 8 billable and nothing held", c)
	}
}

func TestQuotaCheckFailed(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Free)
	// The quota table becomes unusable while keys still authenticate.
	pgtest.Exec(t, b.pool, `ALTER TABLE usage_monthly RENAME TO usage_monthly_gone`)
	r := b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusServiceUnavailable, CodeQuotaCheckFailed)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}

// With no verifier running, the API answers 503 at once and charges nothing.
func TestNoWorkersIs503(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Free)
	start := time.Now()
	r := b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"ann@acme.test"}}).
		want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	b.call(http.MethodPost, "/v1/email/verify/stream", key, map[string]any{"emails": []string{"ann@acme.test"}}).
		want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("503s took %v", took)
	}
	if used := b.usage(acct).Quota; used != 0 {
		t.Errorf("charged %d units for failed requests", used)
	}
	// Nothing was delivered, so no usage row was written; what stays is the logged rejections.
	if n := b.rows(acct, usagetest.Delivered); n != 0 {
		t.Errorf("%d usage rows of verifications that never happened", n)
	}
	if c := b.usage(acct); c.Billable+c.Daily != 0 {
		t.Errorf("%+v: billable counts for failed requests", c)
	}
	if n := b.rows(acct, usagetest.Refused("service_unavailable")); n != 3 {
		t.Errorf("%d logged 503s, want 3", n)
	}
	// Addresses the API decides locally still work without workers.
	b.verify(key, map[string]string{"email": "not-an-address"}).want(t, 200, "")
}

// Usage-log keys are the server's: a client that reuses an X-Request-ID is still counted for
// every email and every rejection.
func TestReusedRequestIDIsCountedEveryTime(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Free)
	for range 2 {
		b.call(http.MethodPost, "/v1/email/verify", key, map[string]string{"email": "x@mailinator.com"}, "X-Request-ID", "same").want(t, 200, "")
		b.call(http.MethodPost, "/v1/email/verify", key, map[string]string{}, "X-Request-ID", "same").want(t, 400, CodeInvalidRequest)
		b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"not-an-address", "y@mailinator.com"}},
			"X-Request-ID", "same").want(t, 200, "")
	}
	if n := b.rows(acct, usagetest.Delivered); n != 6 {
		t.Errorf("%d verification rows, want 6", n)
	}
	if n := b.rows(acct, usagetest.Refused("invalid_request")); n != 2 {
		t.Errorf("%d rejection rows, want 2", n)
	}
	if n := b.usage(acct).Billable; n != 4 {
		t.Errorf("billable %d, want 4", n)
	}
}

// The fleet is asked while Postgres admits only when the account's last admission on this replica
// left room: a throttled account does not make the fleet work, and when the room a replica
// remembers was spent elsewhere, the refused request's answer is dropped and nothing is charged.
func TestFleetWorksOnlyForAdmittedRequests(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{now: time.Now(), env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "4"}})
	acct, key := b.customer(plan.Free)
	spy, err := nats.Connect(b.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	var asked atomic.Int32
	if _, err := spy.Subscribe(queue.SubjectVerifySync, func(*nats.Msg) { asked.Add(1) }); err != nil {
		t.Fatal(err)
	}
	_ = spy.Flush()
	second := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "replica2"), Pool: b.pool, NATS: b.srv.nc, JS: b.js,
		Local: b.engine, Ready: b.srv.ready, Now: b.srv.now})
	t.Cleanup(second.Close)
	verifyOn := func(h http.Handler) reply {
		return callHandler(t, h, http.MethodPost, "/v1/email/verify", key, map[string]string{"email": "ann@acme.test"})
	}
	settled := func(want int32) {
		t.Helper()
		_ = spy.Flush()
		time.Sleep(50 * time.Millisecond)
		if got := asked.Load(); got != want {
			t.Fatalf("the fleet was asked %d times, want %d", got, want)
		}
	}

	// Replica one admits two (the second while asking the fleet) and remembers room for two more.
	for range 2 {
		verifyOn(b.srv.Handler()).want(t, 200, "")
	}
	// Replica two spends that room.
	for range 2 {
		verifyOn(second.Handler()).want(t, 200, "")
	}
	settled(4)
	// Replica one still believes in the room: it asks the fleet early, admission refuses, and
	// the client gets the 429, not the answer. The account's rate-window row is held locked so
	// that admission cannot finish, and cancel the early ask, before the ask has been sent.
	ctx := context.Background()
	lock, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below; this covers a failed test
	if _, err := lock.Exec(ctx, `SELECT 1 FROM rate_windows WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
		t.Fatal(err)
	}
	refused := make(chan reply, 1)
	go func() { refused <- verifyOn(b.srv.Handler()) }()
	for deadline := time.Now().Add(5 * time.Second); asked.Load() < 5 && time.Now().Before(deadline); {
		_ = spy.Flush()
		time.Sleep(5 * time.Millisecond)
	}
	if got := asked.Load(); got != 5 {
		t.Fatalf("while admission waited, the fleet was asked %d times in all, want 5 (one early ask)", got)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	(<-refused).want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	settled(5)
	// Now both replicas know the account is throttled: the fleet is not asked again.
	for _, h := range []http.Handler{b.srv.Handler(), second.Handler(), b.srv.Handler()} {
		verifyOn(h).want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	}
	settled(5)

	b.srv.Close()
	second.Close()
	if n := b.rows(acct, func(r usagetest.Row) bool { return usagetest.Delivered(r) && r.Status == "deliverable" }); n != 4 {
		t.Errorf("%d verified rows with their verdict, want 4", n)
	}
	if n := b.rows(acct, usagetest.Refused("rate_limit")); n != 4 {
		t.Errorf("%d rate_limit rows, want 4", n)
	}
	if n := b.charged(acct); n != 8 {
		t.Errorf("quota units + billable = %d, want 4 + 4", n)
	}
}

// A client that hangs up while the fleet works is not charged: the usage row written with its
// admission, its billable count and its quota unit are taken back, although the request's own
// context is gone.
func TestClientGoneMidVerifyIsNotCharged(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodPost, "/v1/email/verify", strings.NewReader(`{"email":"sue@slow.test"}`)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	stop := time.AfterFunc(200*time.Millisecond, cancel) // the slow domain answers after 700 ms
	defer stop.Stop()
	rec := httptest.NewRecorder()
	b.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if n := b.charged(acct); n != 0 {
		t.Errorf("quota units + billable = %d after the client left, want 0", n)
	}
	if n := b.rows(acct, usagetest.Delivered); n != 0 {
		t.Errorf("%d usage rows for a verification the client never got", n)
	}
}

func TestBatchKeepsInputOrder(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	_, key := b.customer(plan.Free)
	emails := []string{"sue@slow.test", "ann@acme.test", "junk", "nobody@acme.test", "x@mailinator.com", "bob@acme.test"}
	want := []string{"deliverable", "deliverable", "invalid", "undeliverable", "invalid", "deliverable"}
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).want(t, 200, "")
	results := r.body["results"].([]any)
	if r.body["count"] != float64(len(emails)) || len(results) != len(emails) {
		t.Fatalf("count %v, %d results", r.body["count"], len(results))
	}
	for i, x := range results {
		res := x.(map[string]any)
		if res["email"] != emails[i] || res["status"] != want[i] {
			t.Errorf("result %d: %v %v, want %s %s", i, res["email"], res["status"], emails[i], want[i])
		}
	}
}

// The stream flushes each line as it completes: the fast results arrive before the slow one.
func TestStreamFlushesInCompletionOrder(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	_, key := b.customer(plan.Free)
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	body := `{"emails":["sue@slow.test","ann@acme.test","junk"]}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/email/verify/stream", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []map[string]any
	var firstAt time.Duration
	for sc.Scan() {
		if len(lines) == 0 {
			firstAt = time.Since(start)
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		assertSchema(t, loadSpecSchema(t, "StreamResult"), sc.Bytes(), "stream line")
		lines = append(lines, m)
	}
	total := time.Since(start)
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	if lines[len(lines)-1]["email"] != "sue@slow.test" {
		t.Errorf("the slow address was not last: %v", lines)
	}
	if firstAt > 500*time.Millisecond || total < 700*time.Millisecond {
		t.Errorf("first line after %v, all after %v: the first line must not wait for the slow address", firstAt, total)
	}
}

func TestAsyncJob(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	secret := "s3cret-for-signing"
	r := b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet", "webhook_secret": secret}).
		want(t, http.StatusAccepted, "")
	jobID, _ := r.body["job_id"].(string)
	if r.body["status"] != "pending" || len(jobID) != 36 {
		t.Fatalf("body %v", r.body)
	}
	var job map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		job = b.call(http.MethodGet, "/v1/email/jobs/"+jobID, key, nil).want(t, 200, "").body
		if job["status"] == "completed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, _ := job["result"].(map[string]any)
	if job["status"] != "completed" || res["status"] != "deliverable" || res["job_id"] != jobID {
		t.Fatalf("job %v", job)
	}
	// The delivery holds the exact callback bytes and the caller's secret, sealed; the job's
	// copy of the secret is gone.
	var body []byte
	var sealedSecret string
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT body, webhook_secret FROM deliveries WHERE job_id = $1`, jobID).Scan(&body, &sealedSecret), "delivery")
	if got := b.openSecret(sealedSecret); got != secret {
		t.Errorf("delivery secret opens to %q", got)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE id = $1 AND webhook_secret IS NULL`, jobID); n != 1 {
		t.Error("a finished job keeps its webhook secret")
	}
	if !bytes.Contains(body, []byte(`"job_id":"`+jobID+`"`)) {
		t.Errorf("callback body %s", body)
	}
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.ItemKey == "job:"+jobID && r.Billable }); n != 1 {
		t.Errorf("job usage rows %d", n)
	}

	// Jobs are private to their account; unknown and malformed ids are 404 too.
	_, other := b.customer(plan.Builder)
	b.call(http.MethodGet, "/v1/email/jobs/"+jobID, other, nil).want(t, http.StatusNotFound, "job_not_found")
	b.call(http.MethodGet, "/v1/email/jobs/not-a-uuid", key, nil).want(t, http.StatusNotFound, "job_not_found")
}

// An async request whose queueing fails is a 503 only if its job could be removed. One that a
// runner has already started (the message was stored, its acknowledgement lost) is the client's:
// 202, charged once, never a 503 followed by a retry that verifies and bills it twice.
func TestAsyncJobQueueingFailed(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Free)              // the free tier holds a quota unit at admission
	b.srv.dispatch.PublishTimeout = time.Nanosecond // every publish fails, as when the PubAck is lost
	async := map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x"}

	b.verify(key, async).want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 0 {
		t.Fatalf("%d jobs kept after a 503", n)
	}

	// A runner takes every new job at once (a trigger stands in for it).
	pgtest.Exec(t, b.pool, `CREATE FUNCTION start_at_once() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN NEW.state := 'processing'; RETURN NEW; END $$`)
	pgtest.Exec(t, b.pool, `CREATE TRIGGER start_at_once BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION start_at_once()`)
	r := b.verify(key, async).want(t, http.StatusAccepted, "")
	id, _ := r.body["job_id"].(string)
	if n := b.count(`SELECT count(*) FROM jobs WHERE id = $1 AND state = 'processing'`, id); n != 1 {
		t.Fatalf("the started job %q is gone", id)
	}
	b.srv.Close() // writes what is queued behind responses
	if c := usagetest.Of(t, b.pool, acct); c.Quota != 0 || c.Held != 1 || c.Holds != 1 {
		t.Errorf("counts %+v, want the kept job's hold of 1 only (the 503's released)", c)
	}
}

func TestDeliveryRoutes(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	freeAcct, _ := b.account(plan.Free, "")
	paidAcct, paidKey := b.account(plan.Builder, "")
	_, freeKey := freeAcct, b.provisioningKey(freeAcct.ID)

	b.call(http.MethodPost, "/v1/management/deliveries/"+newUUID()+"/retry", freeKey, nil).
		want(t, http.StatusForbidden, CodePlanUpgradeRequired)
	b.call(http.MethodPost, "/v1/management/deliveries/"+newUUID()+"/retry", paidKey, nil).
		want(t, http.StatusNotFound, CodeDeliveryNotFound)

	// A failed delivery of the paid account, and one that succeeded.
	job := newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@acme.test', 'https://hooks.example.com/x', 'completed')`, job, paidAcct.ID)
	failed, done := newUUID(), newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts) VALUES
		($1, $3, $4, 'https://hooks.example.com/x', '{}', 'failed', 3), ($2, $3, $4, 'https://hooks.example.com/x', '{}', 'delivered', 1)`,
		failed, done, job, paidAcct.ID)
	b.call(http.MethodPost, "/v1/management/deliveries/"+done+"/retry", paidKey, nil).want(t, http.StatusConflict, CodeNotReplayable)
	first := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", paidKey, nil).want(t, http.StatusAccepted, "").body
	again := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", paidKey, nil).want(t, http.StatusAccepted, "").body
	if first["delivery_id"] != again["delivery_id"] || first["replay_of"] != failed {
		t.Errorf("a double retry made two replays: %v %v", first, again)
	}

	page := b.call(http.MethodGet, "/v1/management/deliveries?status=failed", paidKey, nil).want(t, 200, "").body
	if ds := page["deliveries"].([]any); len(ds) != 1 || ds[0].(map[string]any)["id"] != failed {
		t.Errorf("failed deliveries %v", page)
	}
	b.call(http.MethodGet, "/v1/management/deliveries?status=lost", paidKey, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
	b.call(http.MethodGet, "/v1/management/deliveries?limit=0", paidKey, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
}

func newUUID() string { return uuid.NewString() }

// loadSpecSchema returns a component schema of /openapi.json.
func loadSpecSchema(t testing.TB, name string) *openapi3.Schema {
	t.Helper()
	doc, _ := loadSpec(t)
	ref := doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		t.Fatalf("openapi: no schema %s", name)
	}
	return ref.Value
}

// domainPart is what the usage log keeps of an address: the lower-cased domain, "" without one.
func domainPart(email string) string {
	if at := strings.LastIndexByte(email, '@'); at >= 0 {
		return strings.ToLower(email[at+1:])
	}
	return ""
}

// Retry-After and RateLimit-Reset round up: a client that waits exactly that many seconds finds
// the window reset (rounding to the nearest second sent it back up to half a second early).
func TestSecondsUntilRoundsUp(t *testing.T) {
	now := time.Date(2026, 11, 23, 8, 42, 11, 700_000_000, time.UTC)
	for _, tt := range []struct {
		reset time.Time
		want  int
	}{
		{time.Date(2026, 11, 23, 8, 43, 0, 0, time.UTC), 49}, // 48.3 s: 48 would be early
		{now.Add(48 * time.Second), 48},
		{now.Add(48*time.Second + time.Nanosecond), 49},
		{now.Add(time.Millisecond), 1},
		{now, 1},
		{now.Add(-time.Second), 1},
	} {
		if got := secondsUntil(tt.reset, now); got != tt.want {
			t.Errorf("secondsUntil(%v) = %d, want %d", tt.reset.Sub(now), got, tt.want)
		}
	}
}

// brokenAfterHeaders is a connection that takes the stream's 200 and then breaks: writes still
// fill the response's buffer, but every later flush to the client fails.
type brokenAfterHeaders struct {
	*httptest.ResponseRecorder
	flushes int
}

func (w *brokenAfterHeaders) FlushError() error {
	w.flushes++
	if w.flushes > 1 {
		return errors.New("write: connection reset by peer")
	}
	w.ResponseRecorder.Flush()
	return nil
}

// Stream lines are owed once the flush that carries them to the connection succeeds, not when
// they are encoded into the response's buffer: a client whose connection broke is not charged
// for lines that never left the server.
func TestStreamLinesOfAFailedFlushAreNotCharged(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	acct, key := b.customer(plan.Free)
	req := httptest.NewRequest(http.MethodPost, "/v1/email/verify/stream", strings.NewReader(`{"emails":["ann@acme.test","nobody@acme.test"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	w := &brokenAfterHeaders{ResponseRecorder: httptest.NewRecorder()}
	b.srv.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK || w.flushes < 2 {
		t.Fatalf("status %d after %d flushes", w.Code, w.flushes)
	}
	deadline := time.Now().Add(3 * time.Second) // the hold may be released just after the response
	for {
		units := b.charged(acct)
		rows := b.rows(acct, usagetest.Delivered)
		if units == 0 && rows == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota units + billable = %d and %d usage rows for lines that never reached the client, want 0 and 0", units, rows)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goneWriter is the connection of a client that went away before its answer was written: every
// write fails, as on a reset connection.
type goneWriter struct{ header http.Header }

func (w *goneWriter) Header() http.Header       { return w.header }
func (w *goneWriter) WriteHeader(int)           {}
func (w *goneWriter) Write([]byte) (int, error) { return 0, syscall.ECONNRESET }

// A verify or batch answer that could not be written did not reach the client: nothing of it is
// billed and its hold goes back (docs/reliability.md, "Metering guarantees"), whether the local
// layers decided it or the worker fleet did.
func TestAnswerNotWrittenIsNotBilled(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	acct, key := b.customer(plan.Free)
	for _, c := range []struct{ path, body string }{
		{"/v1/email/verify", `{"email":"x@mailinator.com"}`},
		{"/v1/email/verify", `{"email":"ann@acme.test"}`},
		{"/v1/email/verify/batch", `{"emails":["ann@acme.test","x@mailinator.com","junk"]}`},
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		b.srv.Handler().ServeHTTP(&goneWriter{header: http.Header{}}, req)
	}
	// Each was admitted and verified (its rate units are spent), and none refused.
	if n := b.count(`SELECT coalesce(sum(used), 0) FROM rate_windows WHERE account_id = $1`, acct); n != 5 {
		t.Fatalf("%d rate units used, want 5: the requests did not all reach admission", n)
	}
	if n := b.rows(acct, func(usagetest.Row) bool { return true }); n != 0 {
		t.Errorf("%d usage rows for answers that were never written, or refusals", n)
	}
	if c := b.usage(acct); c.Quota != 0 || c.Billable != 0 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("counts %+v, want nothing used, billed or held", c)
	}
}

// A single verification or a batch sent with an Idempotency-Key whose answer could not be written
// was not billed, and is not kept for replay either: of two retries with the key sent at once, one
// is verified and billed, once, when its answer is delivered, and the other gets that answer;
// a later retry replays it without billing it again (docs/api.md, "Idempotency";
// docs/reliability.md, "Metering guarantees").
func TestAnswerNotWrittenIsBilledOnceWhenRetriedWithItsKey(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	for i, c := range []struct {
		path   string
		body   any
		emails int
	}{
		{"/v1/email/verify", map[string]string{"email": "x@mailinator.com"}, 1},
		{"/v1/email/verify", map[string]string{"email": "ann@acme.test"}, 1},
		{"/v1/email/verify/batch", map[string]any{"emails": []string{"ann@acme.test", "x@mailinator.com", "junk"}}, 3},
	} {
		acct, key := b.customer(plan.Free)
		idem := fmt.Sprintf("lost-%d", i)
		raw, err := json.Marshal(c.body)
		mustOK(t, err)
		req := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(idempotency.Header, idem)
		b.srv.Handler().ServeHTTP(&goneWriter{header: http.Header{}}, req)
		if n := b.rows(acct, func(usagetest.Row) bool { return true }); n != 0 {
			t.Fatalf("%s: %d usage rows for an answer never written", c.path, n)
		}

		retries := make([]reply, 2)
		var wg sync.WaitGroup
		for k := range retries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				retries[k] = callHandler(t, b.srv.Handler(), http.MethodPost, c.path, key, c.body, idempotency.Header, idem)
			}()
		}
		wg.Wait()
		rows := b.rows(acct, func(usagetest.Row) bool { return true })
		charged := b.charged(acct)
		replayed := retries[0].header.Get(idempotency.ReplayedHeader) + "," + retries[1].header.Get(idempotency.ReplayedHeader)
		if rows != c.emails || charged == 0 {
			t.Errorf("%s: after the retries that got the answer, %d usage rows and %d charged, want %d rows and a charge (replayed: %s)",
				c.path, rows, charged, c.emails, replayed)
			continue
		}
		if retries[0].status != http.StatusOK || !bytes.Equal(retries[0].raw, retries[1].raw) || (replayed != ",true" && replayed != "true,") {
			t.Errorf("%s: retries %d %s and %d %s (replayed: %s), want one answer, run once and replayed once",
				c.path, retries[0].status, retries[0].raw, retries[1].status, retries[1].raw, replayed)
		}
		again := b.call(http.MethodPost, c.path, key, c.body, idempotency.Header, idem).want(t, http.StatusOK, "")
		if again.header.Get(idempotency.ReplayedHeader) != "true" || !bytes.Equal(again.raw, retries[0].raw) {
			t.Errorf("%s: third retry %s %v, want the delivered answer %s replayed", c.path, again.raw, again.header, retries[0].raw)
		}
		if n, ch := b.rows(acct, func(usagetest.Row) bool { return true }), b.charged(acct); n != rows || ch != charged {
			t.Errorf("%s: the replay billed again: %d rows and %d charged, want %d and %d", c.path, n, ch, rows, charged)
		}
	}
}
