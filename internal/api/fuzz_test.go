package api

// Fuzz targets for the request decoding of every route, against the real server: Postgres, an
// embedded NATS server with a verifier worker, and the mail simulator. `go test` runs only the
// seeds, which put a NUL in every field of every route (nulBodyCases) beside the other classic
// bad inputs, so they are a regression test of their own. To fuzz, one target at a time (the
// pattern must match only one: FuzzVerify, FuzzVerifyList, FuzzEmailValue, FuzzManagementBody,
// FuzzPathAndQuery, FuzzHeaders, FuzzListUpload, FuzzStripeWebhook):
//
//	go test -run '^$' -fuzz '^FuzzVerify$' -fuzztime 60s -fuzzminimizetime 5s ./internal/api/
//
// Pauses of many seconds with "0/sec" are the fuzzer minimizing a new input (hence the bounded
// -fuzzminimizetime), not a hung request: a request that hangs fails its input after fuzzHang.
//
// The property is the same everywhere (send): no 5xx; every error is the full envelope, with a
// code and status of docs/errors.md's summary and a message that quotes the request cut; every
// answer matches /openapi.json. Some targets add oracles of their own: a refused request on a
// route that bills charges nothing, and a 400 uses no rate-limit units (sendUnbilled); each
// header's documented rule (FuzzHeaders); one rule for an address on every verify route
// (FuzzEmailValue). A verifier worker runs so that no request is refused for want of one; the
// 503 of a missing or saturated fleet is not the fuzzer's business (TestNoWorkersIs503 covers
// it), so any 5xx here is a finding.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"
	"golang.org/x/net/http/httpguts"

	"github.com/mailvet/mailvet/docs"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// Fixed ids of the fixture's rows, so that seeds can name them in every fuzzing process.
const (
	fuzzJobID      = "0b6f0000-0000-4000-8000-000000000001"
	fuzzDeliveryID = "0b6f0000-0000-4000-8000-000000000002"
	fuzzCustomer   = "cus_fuzz"
)

// fixedTime is when the seed Stripe events were created.
var fixedTime = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// fuzzWorld is the server of a fuzz target and the keys of one scale account whose limits are out
// of the way, so that fuzzed requests get past admission into the handlers.
type fuzzWorld struct {
	*verifyBundle
	acct, std, mgmt string
	list            string // a list of the account, for the list routes' ids and the results' query
}

// stubPortal opens no real billing session: the fuzz targets are about decoding the request,
// and a real provider would refuse some URLs the API accepts (billing_test.go covers those).
type stubPortal struct{}

func (stubPortal) PortalURL(_ context.Context, _, returnURL string) (string, error) {
	return "https://billing.example.com/session?return=" + url.QueryEscape(returnURL), nil
}

func newFuzzWorld(f testing.TB) *fuzzWorld {
	f.Helper()
	env := map[string]string{"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "2000000000", "MAILVET_PLAN_SCALE_MAX_KEYS": "10000"}
	for k, v := range stripeEnv {
		env[k] = v
	}
	b := setupVerify(f, verifyOpts{env: env})
	b.srv.portal = stubPortal{}
	a, mgmt := b.account(plan.Scale, fuzzCustomer)
	// A completed job and a failed delivery, so that GET /jobs/{id} and the retry can succeed.
	pgtest.Exec(f, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'ann@acme.test', 'https://hooks.example.com/x', 'completed')`, fuzzJobID, a.ID)
	pgtest.Exec(f, b.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts) VALUES ($1, $2, $3, 'https://hooks.example.com/x', '{}', 'failed', 3)`,
		fuzzDeliveryID, fuzzJobID, a.ID)
	std := b.standardKey(a.ID).Raw
	list := b.upload(std, "text/plain", "?name=fuzz", "ann@acme.test\nnot-an-address\n").want(f, http.StatusAccepted, "").body["id"].(string)
	b.waitList(std, list, "completed") // charged once and for all before any input runs
	return &fuzzWorld{verifyBundle: b, acct: a.ID, std: std, mgmt: mgmt, list: list}
}

// fuzzRequest builds a request from fuzzed parts without parsing a URL, so that no input can make
// the test itself fail before the server sees it. A nil body sends none.
func fuzzRequest(method, path, rawQuery, key string, body []byte) *http.Request {
	req := httptest.NewRequest(method, "/", nil)
	if body != nil {
		req = httptest.NewRequest(method, "/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	req.URL.Path, req.URL.RawQuery = path, rawQuery
	req.RequestURI = req.URL.RequestURI()
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req
}

// send serves req and checks what every answer of every route must be: no 5xx, the full error
// envelope on every error, and a documented response (the verify stream: valid result lines).
func (w *fuzzWorld) send(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, raw := serveWithin(t, w.srv.Handler(), req, fuzzHang)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s?%s → %d: %s", req.Method, req.URL.Path, req.URL.RawQuery, resp.StatusCode, raw)
	}
	if resp.StatusCode >= 400 {
		var env map[string]any
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatalf("%s %s → %d: body %q is not JSON: %v", req.Method, req.URL.Path, resp.StatusCode, raw, err)
		}
		for _, field := range []string{"error", "message", "action", "docs"} {
			if s, _ := env[field].(string); s == "" {
				t.Fatalf("%s %s → %d: envelope field %q missing or empty: %s", req.Method, req.URL.Path, resp.StatusCode, field, raw)
			}
		}
		// A quoted name or value is cut after 64 bytes (docs/errors.md): however long the
		// request, a message stays short.
		if msg := env["message"].(string); len(msg) > maxMessageLen {
			t.Fatalf("%s %s → %d: a message of %d bytes quotes the request uncut: %.300s…", req.Method, req.URL.Path, resp.StatusCode, len(msg), msg)
		}
		code := env["error"].(string)
		if want, ok := documentedCodes(t)[code]; !ok || want != resp.StatusCode {
			t.Fatalf("%s %s → %d %s: not a code of docs/errors.md's summary with that status (documented: %d)", req.Method, req.URL.Path, resp.StatusCode, code, want)
		}
	}
	if resp.Header.Get("Content-Type") == "application/x-ndjson" && req.URL.Path == "/v1/email/verify/stream" {
		checkStreamLines(t, raw)
		return resp, raw
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
	return resp, raw
}

// spent is what the account has spent this month, once every request's hold is settled (a
// Ledger bills behind the responses): charges are quota units and billable verifications, rate
// the units of its rate-limit windows.
func (w *fuzzWorld) spent(t *testing.T) (charges, rate int) {
	t.Helper()
	usagetest.Settle(t, w.pool)
	c := usagetest.Of(t, w.pool, w.acct)
	if err := w.pool.QueryRow(context.Background(), `SELECT coalesce(sum(used), 0) FROM rate_windows WHERE account_id = $1`, w.acct).Scan(&rate); err != nil {
		t.Fatalf("rate windows: %v", err)
	}
	return c.Quota + c.Billable, rate
}

// sendUnbilled is send for a route that bills, on a world with no asynchronous work under way
// (which would be charged when it completes): a refused request must charge nothing, and a
// 400 must use no rate-limit units either, as validation comes before admission
// (docs/errors.md, "invalid_request").
func (w *fuzzWorld) sendUnbilled(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	charges, rate := w.spent(t)
	resp, raw := w.send(t, req)
	if resp.StatusCode < 400 {
		return resp, raw
	}
	chargesAfter, rateAfter := w.spent(t)
	if chargesAfter != charges {
		t.Fatalf("%s %s → %d, yet the account's charges went from %d to %d: %s", req.Method, req.URL.Path, resp.StatusCode, charges, chargesAfter, raw)
	}
	if resp.StatusCode == http.StatusBadRequest && rateAfter > rate {
		t.Fatalf("%s %s → 400, yet it used %d rate-limit units: %s", req.Method, req.URL.Path, rateAfter-rate, raw)
	}
	return resp, raw
}

var (
	codesOnce sync.Once
	codes     map[string]int
)

// documentedCodes reads the summary table of docs/errors.md, the codes a client may branch on,
// each with its HTTP status: the rows whose first cell links a code, the second its status.
func documentedCodes(t testing.TB) map[string]int {
	t.Helper()
	codesOnce.Do(func() {
		codes = map[string]int{}
		for _, line := range strings.Split(docs.ErrorsMarkdown(), "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "[`") {
				continue
			}
			code, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(cells[1]), "[`"), "`")
			status, _, _ := strings.Cut(strings.TrimSpace(cells[2]), " ")
			n, err := strconv.Atoi(status)
			if err != nil {
				continue
			}
			codes[code] = n
		}
	})
	if len(codes) < 20 {
		t.Fatalf("read only %d codes from docs/errors.md's summary", len(codes))
	}
	return codes
}

// maxMessageLen bounds an error message: the longest sentence of the API with two quotes of 64
// bytes, each escaped for JSON at worst, fits well within it.
const maxMessageLen = 1000

// fuzzHang is how long a fuzzed request may take. The mail world answers in milliseconds, so
// only a request that hangs comes near it (the sync route's own deadline is 10 s).
const fuzzHang = 20 * time.Second

// serveWithin is serve with a watchdog: the fuzzer has no time limit per input, and a request
// that never returned would stall it without saying which input did it.
func serveWithin(t *testing.T, h http.Handler, req *http.Request, limit time.Duration) (*http.Response, []byte) {
	t.Helper()
	type answer struct {
		resp *http.Response
		raw  []byte
	}
	done := make(chan answer, 1)
	go func() {
		resp, raw := serve(h, req)
		done <- answer{resp, raw}
	}()
	select {
	case a := <-done:
		return a.resp, a.raw
	case <-time.After(limit):
		t.Fatalf("%s %s?%s hung: no answer after %v", req.Method, req.URL.Path, req.URL.RawQuery, limit)
		return nil, nil
	}
}

func checkStreamLines(t *testing.T, raw []byte) {
	t.Helper()
	schema := loadSpecSchema(t, "StreamResult")
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, MaxBodyBytes)
	for sc.Scan() {
		assertSchema(t, schema, sc.Bytes(), "stream line")
	}
}

// badJSON are inputs every JSON body route must refuse cleanly: broken syntax, wrong types, huge
// numbers, deep nesting, invalid UTF-8 and lone surrogates (refused before decoding: bindJSON).
var badJSON = []string{
	``, `null`, `""`, `[]`, `{}`, `{`, `}`, `{"a"}`, `{"a":}`, `[1,2`, `{}{}`, `{} x`, "\xef\xbb\xbf{}",
	`1e999`, `-0`, `123456789012345678901234567890`, `{"x": 1e999}`, `{"x": -1e-999}`,
	`"\ud800"`, `{"\ud800": 1}`, "\xff\xfe\xfd", "{\"x\": \"\xff\"}", `{"x": "\udc00\ud800"}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500),
	`\u0000`, `{"x": "\\u0000"}`, "\x00", "{\x00}", `{"x": "\u0000"}`, `{"x": ["\u0000"]}`,
}

// seedBodies adds the bad-JSON seeds and, for each NUL case of path, both spellings of the NUL.
func seedBodies(path string, add func(body string)) {
	for _, b := range badJSON {
		add(b)
	}
	for _, nul := range []string{`\u0000`, "\x00"} {
		for _, c := range nulBodyCases(nul) {
			if c.path == path {
				add(c.body)
			}
		}
	}
}

func FuzzVerify(f *testing.F) {
	w := newFuzzWorld(f)
	seedBodies("/v1/email/verify", func(b string) { f.Add(b) })
	const hook = `, "webhook_url": "https://hooks.example.com/x"`
	for _, b := range []string{
		`{"email": "ann@acme.test"}`, `{"email": "nobody@acme.test"}`, `{"email": "not-an-address"}`,
		`{"email": "x@mailinator.com"}`, `{"email": "ann@nomx.test"}`, `{"EMAIL": "ann@acme.test"}`,
		`{"email": "ann@acme.test"` + hook + `}`, `{"email": "ann@acme.test"` + hook + `, "webhook_secret": "s3cret-for-signing"}`,
		`{"email": "ann@acme.test", "callback_url": "https://hooks.example.com/x"}`,
		`{"email": "ann@acme.test"` + hook + `, "callback_url": "https://hooks.example.com/y"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://b\u00fccher.example/\u2028"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com:99999/x"}`,
		`{"email": "ann@acme.test"` + hook + `, "webhook_secret": "` + strings.Repeat("\u00e9", 200) + `"}`,
		`{"email": "\ud800@acme.test"}`, `{"email": "\udfff"}`, "{\"email\": \"ann\xff@acme.test\"}",
		`{"email": 1e999}`, `{"email": 12345678901234567890}`, `{"email": ["ann@acme.test"]}`, `{"email": {"a": 1}}`,
		`{"email": true}`, `{"email": null}`, `{"email": "ann@acme.test", "email": "\u0000"}`,
		`{"email": "` + strings.Repeat("a", 1100) + `@acme.test"}`, `{"email": "a@` + strings.Repeat("b.", 300) + `test"}`,
		`{"email": "ann@acme.test", "webhook_secret": 7}`, `{"email": "ann@acme.test"}` + "\n\n", `{"email": "ann@acme.test"} {}`,
		`{"email": "ann@acme.test", "webhook_url": null}`, `{"email": "ann@acme.test", "webhook_url": ""}`,
		`{"email": "ann@acme.test", "webhook_url": "http://hooks.example.com/x"}`, `{"email": "ann@acme.test", "webhook_url": "https://127.0.0.1/x"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://localhost/x"}`, `{"email": "ann@acme.test", "webhook_url": "https://[::ffff:10.0.0.1]/x"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/` + strings.Repeat("x", 2030) + `"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "callback_url": "https://hooks.example.com/x"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_secret": "1234567"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_secret": "` + strings.Repeat("s", 257) + `"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_secret": null}`,
		`{"email": "ann@acme.test", "webhook_url": 1}`, `{"email": "ann@acme.test", "webhook_url": ["https://hooks.example.com/x"]}`,
		`{"email": "ann@acme.test", "webhook_secret": "s3cret-for-signing"}`, "\ufeff" + `{"email": "ann@acme.test"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_url": "https://hooks.example.com/x"}`,
		`{"email": "ann@acme.test", "webhook_url": "https://` + strings.Repeat("-", 2000) + `.example.com/"}`,
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		w.send(t, fuzzRequest(http.MethodPost, "/v1/email/verify", "", w.std, []byte(body)))
	})
}

func FuzzVerifyList(f *testing.F) {
	w := newFuzzWorld(f)
	for _, stream := range []bool{false, true} {
		path := "/v1/email/verify/batch"
		if stream {
			path = "/v1/email/verify/stream"
		}
		seedBodies(path, func(b string) { f.Add(b, stream) })
		for _, b := range []string{
			`{"emails": ["ann@acme.test", "junk", "nobody@acme.test", "x@mailinator.com"]}`,
			`{"emails": []}`, `{"emails": null}`, `{"emails": "ann@acme.test"}`, `{"emails": [null]}`, `{"emails": [1e999]}`,
			`{"emails": [{"email": "ann@acme.test"}]}`, `{"emails": [["ann@acme.test"]]}`, `{"emails": ["\ud800", "\udc00"]}`,
			"{\"emails\": [\"\xff\xfe\"]}", `{"emails": ["  "]}`, `{"emails": [""]}`, `{"Emails": ["ann@acme.test"]}`,
			`{"emails": [` + strings.Repeat(`"ann@acme.test",`, 100) + `"ann@acme.test"]}`,
			`{"emails": ["ann@acme.test", "ann@acme.test\\u0000"]}`,
		} {
			f.Add(b, stream)
		}
		// The array limits (docs/api.md, "Limits"): at and one past them, of addresses that fail
		// syntax so that the seeds stay fast.
		for _, n := range []int{100, 101, 1000, 1001} {
			f.Add(`{"emails": [`+strings.TrimSuffix(strings.Repeat(`"x",`, n), ",")+`]}`, stream)
		}
		f.Add(`{"emails": ["ann@acme.test"], "emails": ["nobody@acme.test"]}`, stream)
		f.Add(`{"emails": ["`+strings.Repeat("a", 1025)+`"]}`, stream)
		f.Add(`{"emails": ["`+strings.Repeat("a", 1014)+`@acme.test"]}`, stream)
	}
	f.Fuzz(func(t *testing.T, body string, stream bool) {
		path := "/v1/email/verify/batch"
		if stream {
			path = "/v1/email/verify/stream"
		}
		w.sendUnbilled(t, fuzzRequest(http.MethodPost, path, "", w.std, []byte(body)))
	})
}

// mgmtBodyRoutes are the management routes that take a JSON body.
var mgmtBodyRoutes = []struct{ method, path string }{
	{http.MethodPost, "/v1/management/keys"},
	{http.MethodPost, "/v1/management/billing/portal"},
	{http.MethodDelete, "/v1/management/account"},
}

// FuzzManagementBody covers the bodies of mgmtBodyRoutes. A confirm naming the world's own
// account, which would delete it, is skipped: the seeds never name it, and it is not a mistake.
func FuzzManagementBody(f *testing.F) {
	w := newFuzzWorld(f)
	for i, r := range mgmtBodyRoutes {
		seedBodies(r.path, func(b string) { f.Add(b, uint8(i)) })
	}
	for _, b := range []string{
		`{"label": "prod"}`, `{"label": ""}`, `{"label": " "}`, `{"label": "a\tb"}`, `{"label": "\u202e"}`,
		`{"label": "` + strings.Repeat("\u00e9", 101) + `"}`, `{"label": 7}`, `{"label": null}`, `{"label": "\ud800"}`,
		`{"label": "` + strings.Repeat("\u00e9", 100) + `"}`, `{"label": "e\u0301"}`, `{"label": "\u2066x"}`,
		`{"label": "ci", "mode": "sandbox"}`, `{"label": "ci", "mode": null}`, `{"label": "ci", "mode": "live"}`,
		`{"label": "ci", "mode": "Sandbox"}`, `{"label": "ci", "mode": ""}`, `{"label": "ci", "mode": 1}`,
		`{"label": "ci", "mode": "test"}`, `{"label": "ci", "label": "ci"}`, `{"label": "ci", "Label": "ci"}`,
	} {
		f.Add(b, uint8(0))
	}
	for _, b := range []string{
		`{"return_url": "https://app.example.com/billing"}`, `{"return_url": "http://app.example.com/"}`,
		`{"return_url": "https://[::1]/"}`, `{"return_url": "https://localhost/"}`, `{"return_url": "https://u:p@app.example.com/"}`,
		`{"return_url": "https://app.example.com/` + strings.Repeat("x", 2100) + `"}`, `{"return_url": "https://app.example.com/%zz"}`,
		`{"return_url": "https://b\u00fccher.example/"}`, `{"return_url": "https://app.example.com/\\evil"}`, `{"return_url": []}`,
		`{"return_url": null}`, `{"return_url": "https://app.example.com/` + strings.Repeat("x", 2048-len("https://app.example.com/")) + `"}`,
		`{"return_url": "https://10.0.0.1/"}`, `{"return_url": "https://x.localhost/"}`, `{"return_url": "https://example/"}`,
		`{"return_url": "HTTPS://APP.EXAMPLE.COM/"}`, `{"return_url": "https://app.example.com:0/"}`, `{"return_url": "https://app.example.com:99999/"}`,
		`{"return_url": "https://app.example.com./"}`, `{"return_url": "https://app.example.com/#frag"}`, `{"return_url": "//app.example.com/"}`,
	} {
		f.Add(b, uint8(1))
	}
	for _, b := range []string{
		`{"confirm": "00000000-0000-0000-0000-000000000000"}`, `{"confirm": ""}`, `{"confirm": null}`, `{"confirm": 1}`,
		`{"confirm": "` + fuzzJobID + `", "confirm": "x"}`, `{"confirm": ["x"]}`, `{"Confirm": "x"}`, `{"confirm": "not-a-uuid"}`,
	} {
		f.Add(b, uint8(2))
	}
	f.Fuzz(func(t *testing.T, body string, route uint8) {
		r := mgmtBodyRoutes[int(route)%len(mgmtBodyRoutes)]
		if r.method == http.MethodDelete && strings.Contains(strings.ToLower(body), strings.ToLower(w.acct)) {
			t.Skip("would delete the world's account")
		}
		w.send(t, fuzzRequest(r.method, r.path, "", w.mgmt, []byte(body)))
	})
}

// paramRoutes are the routes whose input is a path parameter or the query string; the fuzzed
// string replaces {p}, or is the raw query when the route has none. In both, {list} stands for
// the world's list and {LIST} for its id in upper case, as the id differs in every process.
var paramRoutes = []struct{ method, path, key string }{
	{http.MethodGet, "/v1/email/jobs/{p}", "std"},
	{http.MethodDelete, "/v1/management/keys/{p}", "mgmt"},
	{http.MethodPost, "/v1/management/deliveries/{p}/retry", "mgmt"},
	{http.MethodGet, "/v1/management/deliveries", "mgmt"},
	{http.MethodGet, "/v1/management/keys", "mgmt"},
	{http.MethodGet, "/v1/email/lists/{p}", "std"},
	{http.MethodGet, "/v1/email/lists/{p}/results", "std"},
	{http.MethodPost, "/v1/email/lists/{p}/cancel", "std"},
	{http.MethodDelete, "/v1/email/lists/{p}", "std"},
	{http.MethodGet, "/v1/email/lists", "std"},
	{http.MethodGet, "/v1/email/lists/{list}/results", "std"},
	{http.MethodGet, "/v1/management/audit", "mgmt"},
	{http.MethodGet, "/v1/management/usage", "mgmt"},
	{http.MethodGet, "/v1/management/usage/summary", "mgmt"},
	{http.MethodGet, "/v1/management/account", "mgmt"},
	{http.MethodDelete, "/v1/email/history", "std"},
}

func FuzzPathAndQuery(f *testing.F) {
	w := newFuzzWorld(f)
	nilID, maxID := "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"
	params := []string{"\x00", "%00", "\\u0000", "\xff\xfe", "' OR 1=1 --", strings.Repeat("9", 500), "", "..", " ", "/",
		"00000000-0000-0000-0000-00000000000\x00", "{00000000-0000-0000-0000-000000000000}", "urn:uuid:" + fuzzJobID,
		fuzzJobID, fuzzDeliveryID, strings.ToUpper(fuzzDeliveryID), nilID, maxID, "{list}", "{LIST}", "{list}x",
		strings.ReplaceAll(fuzzJobID, "-", ""), fuzzJobID[:35], "%7Blist%7D", "{list}%2Fresults", "{list}/"}
	page := cursorAt(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	queries := []string{"status=failed", "status=failed&limit=1", "limit=100", "limit=101", "limit=200", "limit=201", "limit=0", "limit=-1",
		"limit=1e3", "limit=99999999999999999999", "limit=%00", "status=%00", "cursor=%00", "cursor=" + strings.Repeat("A", 32),
		"cursor=" + cursorAt(-1<<63), "cursor=" + cursorAt(1<<63-1), "cursor=" + cursorAt(-210866803200000001),
		"status=failed&status=delivered", "%zz", "status=\x00", "limit=\u0661", "cursor=%2F%2B%3D",
		"limit=+5", "limit=%205", "limit=05", "limit=0x10", "limit=", "cursor=", "cursor=" + page, "cursor=" + page[:len(page)-1],
		"cursor=" + page + "=", "cursor={list}", "cursor={LIST}", "cursor=" + nilID, "cursor=" + fuzzJobID + "&limit=1",
		"format=ndjson", "format=csv&status=invalid,deliverable", "status=deliverable,", "status=", "escape_formulas=TRUE",
		"escape_formulas=false&format=csv", "format=xlsx", "email=ann%40acme.test", "email=ANN%40ACME.TEST", "email=%C0%80%40x",
		"email=", "email=%20", "email=" + strings.Repeat("a", 250) + "%40b.c", "email=ann%40acme.test&email=x", "from=2026-01-01",
		"date=2026-13-45", "since=-1", "stauts=failed", "limit=1&x", "a=1&&b=2", "%3D", "=", "&"}
	for i, r := range paramRoutes {
		if strings.Contains(r.path, "{p}") {
			for _, p := range params {
				f.Add(uint8(i), p)
			}
			continue
		}
		for _, q := range queries {
			f.Add(uint8(i), q)
		}
		for _, p := range params {
			f.Add(uint8(i), p)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, p string) {
		r := paramRoutes[int(route)%len(paramRoutes)]
		key := map[string]string{"std": w.std, "mgmt": w.mgmt}[r.key]
		p = strings.NewReplacer("{list}", w.list, "{LIST}", strings.ToUpper(w.list)).Replace(p)
		if r.method == http.MethodDelete && strings.Contains(strings.ToLower(p), w.list) {
			t.Skip("would delete the world's list, which the results route's inputs read")
		}
		path, query := strings.Replace(r.path, "{p}", p, 1), ""
		if !strings.Contains(r.path, "{p}") {
			path, query = r.path, p
		}
		path = strings.Replace(path, "{list}", w.list, 1)
		w.send(t, fuzzRequest(r.method, path, query, key, nil))
	})
}

// FuzzStripeWebhook signs the fuzzed body with the endpoint's secret when signed is true, so the
// fuzzer reaches the event handling behind the signature check.
func FuzzStripeWebhook(f *testing.F) {
	w := newFuzzWorld(f)
	seedBodies("/v1/stripe/webhook", func(b string) { f.Add(b, true) })
	events := [][]byte{
		subEvent("evt_1", "customer.subscription.updated", fixedTime, nil),
		subEvent("evt_2", "customer.subscription.deleted", fixedTime, map[string]any{"customer": fuzzCustomer}),
		subEvent("evt_3", "customer.subscription.created", fixedTime, map[string]any{"customer": fuzzCustomer, "status": "trialing"}),
		subEvent("evt_4", "invoice.paid", fixedTime, nil),
		subEvent("evt_5", "customer.subscription.updated", fixedTime, map[string]any{"customer": "cus_\u0000"}),
		subEvent("evt_6", "customer.subscription.updated", fixedTime, map[string]any{"customer": fuzzCustomer, "current_period_end": int64(1) << 62}),
		subEvent("evt_7", "customer.subscription.updated", fixedTime, map[string]any{"customer": fuzzCustomer, "trial_end": -int64(1) << 62}),
		subEvent("evt_8", "customer.subscription.updated", fixedTime, map[string]any{"customer": fuzzCustomer, "status": "\u0000"}),
		subEvent("evt_\u0000", "customer.subscription.updated", fixedTime, nil),
		subEvent("", "customer.subscription.updated", fixedTime, nil),
		subEvent("evt_9", "customer.subscription.updated", fixedTime, map[string]any{"customer": map[string]any{"id": fuzzCustomer}}),
		subEvent("evt_10", "customer.subscription.updated", fixedTime, map[string]any{"customer": 7}),
		[]byte(`{"id": "evt_11", "object": "event", "type": "customer.subscription.updated", "created": 9223372036854775807, "data": {"object": {"customer": "cus_fuzz"}}}`),
		[]byte(`{"id": "evt_12", "object": "event", "type": "customer.subscription.updated", "created": -62135596801, "data": {"object": {"customer": "cus_fuzz"}}}`),
		[]byte(`{"id": "evt_13", "object": "event", "type": "customer.subscription.updated", "created": 1, "data": null}`),
		[]byte(`{"id": "evt_14", "object": "event", "type": "customer.subscription.updated", "created": 1, "data": {"object": "\u0000"}}`),
	}
	for _, e := range events {
		f.Add(string(e), true)
		f.Add(string(e), false)
	}
	f.Fuzz(func(t *testing.T, body string, signed bool) {
		req := fuzzRequest(http.MethodPost, "/v1/stripe/webhook", "", "", []byte(body))
		if signed {
			s := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: whsec})
			req.Header.Set("Stripe-Signature", s.Header)
		}
		w.send(t, req)
	})
}

// headerRoutes are the routes FuzzHeaders sends its headers to, each with a valid body, so that
// only the headers decide the answer.
var headerRoutes = []struct {
	method, path, key, body string
	idempotent              bool
}{
	{http.MethodPost, "/v1/email/verify", "std", `{"email": "not-an-address"}`, true},
	{http.MethodPost, "/v1/email/verify/batch", "std", `{"emails": ["x", "y"]}`, true},
	{http.MethodPost, "/v1/email/verify/stream", "std", `{"emails": ["x"]}`, false},
	{http.MethodPost, "/v1/management/keys", "mgmt", `{"label": "fuzz"}`, true},
	{http.MethodGet, "/v1/management/keys", "mgmt", "", false},
}

// FuzzHeaders fuzzes the Authorization, Idempotency-Key and X-Request-Id headers. Each fuzzed
// string is one or more header values, split at "\n"; {key} in authz is the route's key. Values
// Go's HTTP server would refuse itself (control characters) are skipped, and each is trimmed of
// the spaces and tabs around it as Go's server does, so that every input is a request that can
// reach the API. Beside send's checks, each header's rule (docs/api.md) is an oracle of its own.
func FuzzHeaders(f *testing.F) {
	w := newFuzzWorld(f)
	authz := []string{"Bearer {key}", "bearer {key}", "BEARER {key}", "Bearer  {key}", "Bearer\t{key}", " Bearer {key} ",
		"Bearer {key}\nBearer {key}", "Bearer {key}\nBearer sk_live_x", "Bearer", "Bearer ", "Bearer {key}x", "Bearer {key} x",
		"Basic {key}", "{key}", "Token {key}", "Bearer sk_live_", "Bearer sk_mgmt_", "Bearer " + strings.Repeat("k", 5000),
		"Bearer \u00e9{key}", "Bearer {key}\u00a0", "", "Bearer sk_test_{key}"}
	idem := []string{"", "8f14e45f-ceea-467f-a0e6-2b7f1a4c9d21", "a", strings.Repeat("k", 255), strings.Repeat("k", 256), "a b",
		"\u00e9", "k1\nk1", "k1\nk2", "!~", "{key}", " "}
	for i := range headerRoutes {
		for _, a := range authz {
			f.Add(uint8(i), a, "", "")
		}
		for _, k := range idem {
			f.Add(uint8(i), "Bearer {key}", k, "")
		}
	}
	for _, id := range []string{"req-1", strings.Repeat("r", 128), strings.Repeat("r", 129), "a b", "\u00e9", "x\nx", ":._-"} {
		f.Add(uint8(0), "Bearer {key}", "", id)
	}
	f.Fuzz(func(t *testing.T, route uint8, authz, idem, requestID string) {
		r := headerRoutes[int(route)%len(headerRoutes)]
		key := map[string]string{"std": w.std, "mgmt": w.mgmt}[r.key]
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		req := fuzzRequest(r.method, r.path, "", "", body)
		authValues := headerValues(t, strings.ReplaceAll(authz, "{key}", key))
		idemValues := headerValues(t, idem)
		idValues := headerValues(t, requestID)
		req.Header["Authorization"] = authValues
		req.Header[idempotency.Header] = idemValues
		req.Header["X-Request-Id"] = idValues
		resp, raw := w.sendUnbilled(t, req)

		var code string
		if resp.StatusCode >= 400 {
			var env struct{ Error string }
			_ = json.Unmarshal(raw, &env)
			code = env.Error
		}
		// Authorization (docs/api.md, "Authentication"): one header "Bearer <key>", the scheme
		// in any case, is the key; anything else is refused before anything else is read.
		token, isBearer := "", false
		if len(authValues) == 1 {
			token, isBearer = bearer(authValues[0])
		}
		switch {
		case len(authValues) > 1:
			wantCode(t, code, CodeInvalidAPIKey, raw)
		case !isBearer:
			wantCode(t, code, CodeMissingAPIKey, raw)
		case token != key:
			wantCode(t, code, CodeInvalidAPIKey, raw)
		case r.idempotent && len(idemValues) > 0 && (len(idemValues) > 1 || idempotency.CheckKey(idemValues[0]) != nil):
			// Idempotency-Key (docs/api.md, "Idempotency"): 1 to 255 of ! to ~, sent once.
			wantCode(t, code, CodeInvalidRequest, raw)
		case code == CodeInvalidRequest || code == CodeMissingAPIKey || code == CodeInvalidAPIKey:
			t.Fatalf("authorization %q, Idempotency-Key %q: refused with %s: %s", authValues, idemValues, code, raw)
		}
		// X-Request-Id (docs/api.md, "Conventions"): kept when valid, else replaced.
		switch got := resp.Header.Get("X-Request-Id"); {
		case len(idValues) > 1:
			if !validRequestID(got) {
				t.Fatalf("X-Request-Id %q answered with %q", idValues, got)
			}
		case len(idValues) == 1 && validRequestID(idValues[0]):
			if got != idValues[0] {
				t.Fatalf("X-Request-Id %q answered with %q", idValues[0], got)
			}
		case got == "" || (len(idValues) == 1 && got == idValues[0]):
			t.Fatalf("X-Request-Id %q answered with %q, want a new id", idValues, got)
		}
	})
}

// headerValues splits a fuzzed string into the values of one header as Go's HTTP server would
// hand them to the API, and skips the input when the server would refuse one of them itself.
func headerValues(t *testing.T, s string) []string {
	if s == "" {
		return nil
	}
	var vals []string
	for _, v := range strings.Split(s, "\n") {
		if !httpguts.ValidHeaderFieldValue(v) {
			t.Skip("a header value Go's HTTP server refuses before the API sees it")
		}
		vals = append(vals, strings.Trim(v, " \t"))
	}
	return vals
}

func wantCode(t *testing.T, got, want string, raw []byte) {
	t.Helper()
	if got != want {
		t.Fatalf("error %q, want %q: %s", got, want, raw)
	}
}

// uploadTypes are the Content-Types FuzzListUpload sends its file as.
var uploadTypes = []string{"text/plain", "text/csv", "application/x-ndjson", "text/csv; charset=utf-8", "application/json"}

// FuzzListUpload fuzzes POST /v1/email/lists: its query string and its file. The seeds' files
// hold addresses that fail syntax, so that an accepted list costs the verifiers nothing.
func FuzzListUpload(f *testing.F) {
	w := newFuzzWorld(f)
	queries := []string{"", "name=june", "name=" + strings.Repeat("n", 201), "name=%E2%80%AE", "name=a%0Ab", "name=%FF",
		"column=Email", "column=nope", "column=%00", "webhook_url=https%3A%2F%2Fhooks.example.com%2Fl",
		"webhook_url=", "callback_url=https%3A%2F%2Fhooks.example.com%2Fl&webhook_url=https%3A%2F%2Fhooks.example.com%2Fm",
		"webhook_url=https%3A%2F%2Fhooks.example.com%2Fl&webhook_secret=short", "webhook_secret=s3cret-for-signing",
		"webhook_url=https%3A%2F%2Fhooks.example.com%2Fl&webhook_secret=%FF%FF%FF%FF%FF%FF%FF%FF",
		"webhook_url=http%3A%2F%2F127.0.0.1%2F", "webhook_url=%FF", "stauts=x", "name=a&name=b", "%zz",
		"column=" + strings.Repeat("n", 200), "webhook_url=https%3A%2F%2F" + strings.Repeat("-", 2000) + ".example.com%2F"}
	files := []string{"x\ny\n", "email\nx\n", "email,name\nx,1\n", "email,name\nx\n", "{\"email\": \"x\"}\n", "{\"email\": 1}\n",
		"", "\n\n", "\xef\xbb\xbfx\n", "\xff\xfe", "x\x00\n", "\"unclosed\nx\n", "{\"email\": \"\\u0000\"}\n", "x\ry\r",
		strings.Repeat("c", 3000) + ",email\nx,y\n", strings.Repeat("c", 3000) + "\nx\n", strings.Repeat("c,", 999) + "c\n" + strings.Repeat("x,", 999) + "x\n"}
	for i := range uploadTypes {
		for _, q := range queries {
			f.Add(uint8(i), q, "x\n")
		}
		for _, file := range files {
			f.Add(uint8(i), "", file)
		}
	}
	f.Fuzz(func(t *testing.T, ct uint8, query, file string) {
		req := fuzzRequest(http.MethodPost, "/v1/email/lists", query, w.std, []byte(file))
		req.Header.Set("Content-Type", uploadTypes[int(ct)%len(uploadTypes)])
		w.send(t, req)
	})
}

// FuzzEmailValue sends one fuzzed JSON string, as written between the quotes, as the address of
// each verify route: POST /v1/email/verify, synchronous and asynchronous, /verify/batch and
// /verify/stream. An email value has one rule on every route (docs/api.md, "Limits"), so the
// routes must agree on whether it is a bad request, and on the result of one that is not (the
// asynchronous job's is read once it has finished).
func FuzzEmailValue(f *testing.F) {
	w := newFuzzWorld(f)
	for _, s := range []string{"ann@acme.test", "not-an-address", "", " ", "\\u0000", "\\ud800", "\xff", "\\t", "\\u00a0",
		"\\u2028", "ann@acme.test\\n", strings.Repeat("a", 1014) + "@acme.test", strings.Repeat("a", 1015) + "@acme.test",
		strings.Repeat("\u00e9", 512), strings.Repeat("\u00e9", 513), "\\\"", "\\\\", "\\x", "\\u12", "\"", "\\ufeff",
		"ann@b\u00fccher.example", "ann@xn--bcher-kva.example", "ANN@ACME.TEST", "\u3000", "\\u200b"} {
		f.Add(s)
	}
	routes := []struct{ path, body string }{
		{"/v1/email/verify", `{"email": "%s"}`},
		{"/v1/email/verify", `{"email": "%s", "webhook_url": "https://hooks.example.com/x"}`},
		{"/v1/email/verify/batch", `{"emails": ["%s"]}`},
		{"/v1/email/verify/stream", `{"emails": ["%s"]}`},
	}
	f.Fuzz(func(t *testing.T, email string) {
		if !json.Valid([]byte(`"` + email + `"`)) {
			t.Skip("not the inside of a JSON string")
		}
		var refused, verdicts []string
		for i, r := range routes {
			body := strings.Replace(r.body, "%s", email, 1)
			resp, raw := w.send(t, fuzzRequest(http.MethodPost, r.path, "", w.std, []byte(body)))
			switch resp.StatusCode {
			case http.StatusBadRequest:
				refused = append(refused, r.path+": "+string(raw))
			case http.StatusAccepted:
				raw = w.finishJob(t, raw)
			}
			if v := verdictOf(raw); v != "" {
				verdicts = append(verdicts, fmt.Sprintf("%d %s: %s", i, r.path, v))
			}
		}
		if len(refused) != 0 && len(refused) != len(routes) {
			t.Fatalf("email %q is refused by only some verify routes:\n%s", email, strings.Join(refused, "\n"))
		}
		for _, v := range verdicts {
			if verdictPart(v) != verdictPart(verdicts[0]) {
				t.Fatalf("email %q has different results on the verify routes:\n%s", email, strings.Join(verdicts, "\n"))
			}
		}
	})
}

func verdictPart(v string) string { _, r, _ := strings.Cut(v, ": "); return r }

// verdictOf is the email, status and reason of the one result in a verify answer: the single
// result, a job's result, a batch's first result or a stream's first line; "" when there is none.
func verdictOf(raw []byte) string {
	var r struct {
		Email, Status, Reason string
		Result                *struct{ Email, Status, Reason string }
		Results               []struct{ Email, Status, Reason string }
	}
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	if json.Unmarshal(line, &r) != nil {
		return ""
	}
	switch {
	case r.Result != nil:
		r.Email, r.Status, r.Reason = r.Result.Email, r.Result.Status, r.Result.Reason
	case len(r.Results) > 0:
		r.Email, r.Status, r.Reason = r.Results[0].Email, r.Results[0].Status, r.Results[0].Reason
	}
	if r.Status == "" || r.Status == "pending" || r.Status == "processing" || r.Status == "retrying" {
		return ""
	}
	return fmt.Sprintf("%q %s/%s", r.Email, r.Status, r.Reason)
}

// finishJob reads the job of a 202 answer until it has finished, each answer checked by send: the
// result of a fuzzed address must match the document as the synchronous one does. The seeds'
// addresses are verified in milliseconds; a job still unfinished after jobWait is left as it is.
func (w *fuzzWorld) finishJob(t *testing.T, accepted []byte) (job []byte) {
	t.Helper()
	var a struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(accepted, &a); err != nil || a.JobID == "" {
		t.Fatalf("202 without a job_id: %s", accepted)
	}
	for deadline := time.Now().Add(jobWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		_, job = w.send(t, fuzzRequest(http.MethodGet, "/v1/email/jobs/"+a.JobID, "", w.std, nil))
		var j struct{ Status string }
		_ = json.Unmarshal(job, &j)
		if j.Status == "completed" || j.Status == "failed" {
			return job
		}
	}
	return job
}

const jobWait = 3 * time.Second
