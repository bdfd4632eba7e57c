package api

// Fuzz targets for the request decoding of every route, against the real server: Postgres, an
// embedded NATS server with a verifier worker, and the mail simulator. `go test` runs only the
// seeds, which put a NUL in every field of every route (nulBodyCases) beside the other classic
// bad inputs, so they are a regression test of their own. To fuzz, one target at a time (the
// pattern must match only one: FuzzVerify, FuzzVerifyList, FuzzManagementBody, FuzzPathAndQuery,
// FuzzStripeWebhook):
//
//	go test -run '^$' -fuzz '^FuzzVerify$' -fuzztime 60s ./internal/api/
//
// Pauses of many seconds with "0/sec" are the fuzzer minimizing a new input, not a hung request:
// a request that hangs fails its input after fuzzHang.
//
// The property is the same everywhere: no 5xx, and every error is the full envelope. A verifier
// worker runs so that no request is refused for want of one; the 503 of a missing or saturated
// fleet is not the fuzzer's business (TestNoWorkersIs503 covers it), so any 5xx here is a finding.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
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
	std, mgmt string
}

// stubPortal opens no real billing session: the fuzz targets are about decoding the request,
// and a real provider would refuse some URLs the API accepts (billing_test.go covers those).
type stubPortal struct{}

func (stubPortal) PortalURL(_ context.Context, _, returnURL string) (string, error) {
	return "https://billing.example.com/session?return=" + url.QueryEscape(returnURL), nil
}

func newFuzzWorld(f *testing.F) *fuzzWorld {
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
	return &fuzzWorld{verifyBundle: b, std: b.standardKey(a.ID).Raw, mgmt: mgmt}
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
// envelope on every error, and a documented response (an NDJSON stream: valid result lines).
func (w *fuzzWorld) send(t *testing.T, req *http.Request) {
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
	}
	if resp.Header.Get("Content-Type") == "application/x-ndjson" {
		checkStreamLines(t, raw)
		return
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
}

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
	}
	f.Fuzz(func(t *testing.T, body string, stream bool) {
		path := "/v1/email/verify/batch"
		if stream {
			path = "/v1/email/verify/stream"
		}
		w.send(t, fuzzRequest(http.MethodPost, path, "", w.std, []byte(body)))
	})
}

// FuzzManagementBody covers POST /v1/management/keys (portal false) and POST
// /v1/management/billing/portal (portal true).
func FuzzManagementBody(f *testing.F) {
	w := newFuzzWorld(f)
	for _, portal := range []bool{false, true} {
		path := "/v1/management/keys"
		if portal {
			path = "/v1/management/billing/portal"
		}
		seedBodies(path, func(b string) { f.Add(b, portal) })
	}
	for _, b := range []string{
		`{"label": "prod"}`, `{"label": ""}`, `{"label": " "}`, `{"label": "a\tb"}`, `{"label": "\u202e"}`,
		`{"label": "` + strings.Repeat("\u00e9", 101) + `"}`, `{"label": 7}`, `{"label": null}`, `{"label": "\ud800"}`,
	} {
		f.Add(b, false)
	}
	for _, b := range []string{
		`{"return_url": "https://app.example.com/billing"}`, `{"return_url": "http://app.example.com/"}`,
		`{"return_url": "https://[::1]/"}`, `{"return_url": "https://localhost/"}`, `{"return_url": "https://u:p@app.example.com/"}`,
		`{"return_url": "https://app.example.com/` + strings.Repeat("x", 2100) + `"}`, `{"return_url": "https://app.example.com/%zz"}`,
		`{"return_url": "https://b\u00fccher.example/"}`, `{"return_url": "https://app.example.com/\\evil"}`, `{"return_url": []}`,
	} {
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, body string, portal bool) {
		path := "/v1/management/keys"
		if portal {
			path = "/v1/management/billing/portal"
		}
		w.send(t, fuzzRequest(http.MethodPost, path, "", w.mgmt, []byte(body)))
	})
}

// paramRoutes are the routes whose input is a path parameter or the query string; the fuzzed
// string replaces {p}, or is the raw query when the route has none.
var paramRoutes = []struct{ method, path, key string }{
	{http.MethodGet, "/v1/email/jobs/{p}", "std"},
	{http.MethodDelete, "/v1/management/keys/{p}", "mgmt"},
	{http.MethodPost, "/v1/management/deliveries/{p}/retry", "mgmt"},
	{http.MethodGet, "/v1/management/deliveries", "mgmt"},
	{http.MethodGet, "/v1/management/keys", "mgmt"},
}

func FuzzPathAndQuery(f *testing.F) {
	w := newFuzzWorld(f)
	params := []string{"\x00", "%00", "\\u0000", "\xff\xfe", "' OR 1=1 --", strings.Repeat("9", 500), "", "..", " ", "/",
		"00000000-0000-0000-0000-00000000000\x00", "{00000000-0000-0000-0000-000000000000}", "urn:uuid:" + fuzzJobID,
		fuzzJobID, fuzzDeliveryID, strings.ToUpper(fuzzDeliveryID)}
	queries := []string{"status=failed", "status=failed&limit=1", "limit=100", "limit=101", "limit=0", "limit=-1",
		"limit=1e3", "limit=99999999999999999999", "limit=%00", "status=%00", "cursor=%00", "cursor=" + strings.Repeat("A", 32),
		"cursor=" + cursorAt(-1<<63), "cursor=" + cursorAt(1<<63-1), "cursor=" + cursorAt(-210866803200000001),
		"status=failed&status=delivered", "%zz", "status=\x00", "limit=\u0661", "cursor=%2F%2B%3D"}
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
		path, query := strings.Replace(r.path, "{p}", p, 1), ""
		if !strings.Contains(r.path, "{p}") {
			path, query = r.path, p
		}
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
