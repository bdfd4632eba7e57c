package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
)

// A query string Go's URL.Query would trim or merge is a 400 on every /v1 route, before the
// handler could act on what is left (docs/api.md, "Conventions").
func TestMalformedQueryStringIsRefused(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	const file = "email\nann@acme.test\n"
	hook := "webhook_url=https://hooks.example.com/x"
	var many strings.Builder // 10,001 distinct parameters: one more than Go parses
	for i := range 10001 {
		fmt.Fprintf(&many, "p%d=1&", i)
	}
	for _, c := range []struct {
		name, method, path, key, says string
	}{
		// The secret dropped: the list's callbacks would go out unsigned.
		{"bad escape in secret", "POST", "/v1/email/lists?" + hook + "&webhook_secret=%zz", key, `"webhook_secret=%zz" holds the bad percent-escape "%zz"`},
		{"bad escape in hook", "POST", "/v1/email/lists?webhook_url=%zz", key, `"webhook_url=%zz"`},
		{"bad escape in a key", "POST", "/v1/email/lists?na%zme=june", key, `"%zm"`},
		{"bad escape in an unknown parameter", "POST", "/v1/email/lists?foo=%zz", key, `"foo=%zz"`},
		{"semicolon", "POST", "/v1/email/lists?x;y", key, `"x;y" holds a ";"`},
		{"repeated name", "POST", "/v1/email/lists?name=a&name=b", key, `Query parameter "name" is given more than once.`},
		{"repeated once escaped", "POST", "/v1/email/lists?name=a&n%61me=b", key, `"name" is given more than once`},
		{"repeated secret", "POST", "/v1/email/lists?" + hook + "&webhook_secret=12345678&webhook_secret=87654321", key, `"webhook_secret" is given more than once`},
		{"bad limit", "GET", "/v1/email/lists?limit=%zz", key, `"limit=%zz"`},
		{"repeated limit", "GET", "/v1/email/lists?limit=10&limit=200", key, `"limit" is given more than once`},
		{"repeated format", "GET", "/v1/email/lists/00000000-0000-4000-8000-000000000000/results?format=csv&format=ndjson", key, `"format"`},
		{"deliveries bad limit", "GET", "/v1/management/deliveries?limit=%zz", mgmt, `"limit=%zz"`},
		{"deliveries repeated status", "GET", "/v1/management/deliveries?status=failed&status=delivered", mgmt, `"status" is given more than once`},
		// Given empty, a callback parameter or a filter is refused, not read as absent.
		{"empty webhook_url", "POST", "/v1/email/lists?webhook_url=", key, "Query parameter webhook_url is empty"},
		{"empty callback_url", "POST", "/v1/email/lists?callback_url=", key, "Query parameter callback_url is empty"},
		{"empty webhook_secret", "POST", "/v1/email/lists?" + hook + "&webhook_secret=", key, "Query parameter webhook_secret is empty"},
		{"deliveries empty status", "GET", "/v1/management/deliveries?status=", mgmt, "Query parameter status is empty"},
		{"deliveries limit over 100", "GET", "/v1/management/deliveries?limit=101", mgmt, "Query parameter limit must be a whole number from 1 to 100."},
		// Routes without query parameters ignore a clean query but not a broken one.
		{"route without parameters", "GET", "/v1/management/account?x=%zz", mgmt, `"x=%zz"`},
		{"repeated ignored parameter", "GET", "/v1/management/account?x=1&x=2", mgmt, `"x"`},
		{"too many parameters", "GET", "/v1/management/account?" + many.String(), mgmt, "number of URL query parameters exceeded limit"},
		// Checked before the key, like the body limit.
		{"without a key", "GET", "/v1/email/lists?limit=%zz", "", "malformed"},
		{"long pair is clipped", "GET", "/v1/email/lists?cursor=" + strings.Repeat("x", 500) + "%zz", key, "xxx…"},
	} {
		var body any
		var headers []string
		if c.method == "POST" {
			body, headers = file, []string{"Content-Type", "text/csv"}
		}
		r := b.call(c.method, c.path, c.key, body, headers...)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400; body %s", c.name, r.status, r.raw)
			continue
		}
		assertEnvelope(t, r.body, "invalid_request")
		msg, _ := r.body["message"].(string)
		if !strings.Contains(msg, c.says) {
			t.Errorf("%s: message %q does not say %q", c.name, msg, c.says)
		}
		if len(msg) > 300 {
			t.Errorf("%s: message of %d bytes quotes too much of the query", c.name, len(msg))
		}
	}
	// Two different secrets, one in the header and one in the query: refused, as two different
	// callback URLs are, instead of the header silently winning.
	b.call("POST", "/v1/email/lists?"+hook+"&webhook_secret=87654321", key, file, "Content-Type", "text/csv",
		"Mailvet-Webhook-Secret", "12345678").want(t, http.StatusBadRequest, "invalid_request")
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d lists stored from malformed query strings", n)
	}

	// Clean queries still work, including on routes that take none, escaped "%" and ";"
	// included, and empty pairs, which Go skips as well.
	b.call("GET", "/v1/management/account?anything=1&&other=", mgmt, nil).want(t, http.StatusOK, "")
	b.call("GET", "/v1/email/lists?limit=5&cursor=", key, nil).want(t, http.StatusOK, "")
	b.call("GET", "/v1/management/deliveries?status=failed&limit=10", mgmt, nil).want(t, http.StatusOK, "")
	r := b.call("POST", "/v1/email/lists?name=50%25%3Boff&"+hook+"&webhook_secret=abc%25defgh", key, file,
		"Content-Type", "text/csv").want(t, http.StatusAccepted, "")
	if r.body["name"] != "50%;off" {
		t.Errorf("list name %v, want 50%%;off", r.body["name"])
	}
	var secret string
	if err := b.pool.QueryRow(t.Context(), `SELECT webhook_secret FROM lists WHERE id = $1`, r.body["id"]).Scan(&secret); err != nil || b.openSecret(secret) != "abc%defgh" {
		t.Errorf("stored secret %q (%v), want abc%%defgh", secret, err)
	}

	// Outside /v1 the query string is not the API's: the pages answer as before.
	for _, path := range []string{"/healthz?x=%zz", "/openapi.json?x=%zz&x=1"} {
		resp, raw := serve(b.srv.Handler(), httptest.NewRequest("GET", path, nil))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, body %.200s", path, resp.StatusCode, raw)
		}
	}
}

// A client's X-Request-Id is echoed and logged only when it is short and plain; anything else
// is replaced by a generated id, on every route and with or without a key.
func TestRequestIDIsBounded(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	b := setup(t, nil, func(d *Deps) { d.Log = app.NewLogger(logs, "test") })
	_, mgmt := b.account(plan.Free, "")
	max := strings.Repeat("a", maxRequestIDLen)
	huge := strings.Repeat("b", 900<<10)
	for _, c := range []struct {
		name, id string
		kept     bool
	}{
		{"plain", "req-2026.11.22_03:04:05", true},
		{"UUID", "0b6f7a2c-4c1e-4d8a-9a57-2d0f3c5e8b11", true},
		{"128 bytes", max, true},
		{"129 bytes", max + "a", false},
		{"900 KB", huge, false},
		{"space", "a b", false},
		{"quote", `a"b`, false},
		{"non-ASCII", "ré", false},
		{"control byte", "a\tb", false},
		{"markup", "<script>", false},
	} {
		for _, key := range []string{"", mgmt} {
			r := b.call("GET", "/v1/management/account", key, nil, echo.HeaderXRequestID, c.id)
			got := r.header.Get(echo.HeaderXRequestID)
			switch {
			case c.kept && got != c.id:
				t.Errorf("%s (key %t): X-Request-Id %.40q, want it kept", c.name, key != "", got)
			case !c.kept && (got == c.id || !validRequestID(got)):
				t.Errorf("%s (key %t): X-Request-Id %.40q, want a generated one", c.name, key != "", got)
			}
			if !loggedWithID(t, logs.String(), got) {
				t.Errorf("%s (key %t): no log line with request_id %.40q", c.name, key != "", got)
			}
		}
	}
	// A request without one gets one.
	if got := b.call("GET", "/healthz", "", nil).header.Get(echo.HeaderXRequestID); !validRequestID(got) {
		t.Errorf("generated X-Request-Id %q", got)
	}
	if out := logs.String(); strings.Contains(out, huge[:1000]) || len(out) > 100<<10 {
		t.Errorf("the log holds the oversized id (%d bytes of log)", len(out))
	}
}

// loggedWithID reports whether one JSON line of out is the request log line of id.
func loggedWithID(t *testing.T, out, id string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %.200q is not JSON: %v", sc.Text(), err)
		}
		if line["msg"] == "http request" && line["request_id"] == id {
			return true
		}
	}
	return false
}

// The management routes that take query parameters refuse one they do not know, as the email
// routes do (docs/api.md, "Conventions"): a mistyped filter (stauts=failed) would otherwise list
// every delivery as if it had matched.
func TestManagementListsRefuseUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Builder, "")
	for _, c := range []struct{ path, says string }{
		{"/v1/management/deliveries?stauts=failed", `Unknown query parameter "stauts"; use status, limit and cursor.`},
		{"/v1/management/deliveries?status=failed&page=2", `Unknown query parameter "page"`},
		{"/v1/management/deliveries?Limit=10", `Unknown query parameter "Limit"`},
		{"/v1/management/audit?limt=10", `Unknown query parameter "limt"; use limit and cursor.`},
		{"/v1/management/audit?limit=10&kind=sign_in", `Unknown query parameter "kind"`},
	} {
		r := b.call(http.MethodGet, c.path, mgmt, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, c.says) {
			t.Errorf("%s: message %q, want %q", c.path, msg, c.says)
		}
	}
	b.call(http.MethodGet, "/v1/management/deliveries?status=failed&limit=10&cursor=", mgmt, nil).want(t, http.StatusOK, "")
	b.call(http.MethodGet, "/v1/management/audit?limit=10&cursor=", mgmt, nil).want(t, http.StatusOK, "")
}

// The email routes that check their own query parameters name the same unknown one every time,
// the first in sorted order, as the list and management routes do (onlyQuery): not whichever a
// map happened to yield first.
func TestUnknownQueryParameterNamedAlike(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acct, _ := b.account(plan.Builder, "")
	std := b.standardKey(acct.ID).Raw
	for _, c := range []struct {
		method, path string
		body         any
		headers      []string
		says         string
	}{
		{http.MethodDelete, "/v1/email/history?email=ann%40acme.example&zeta=1&alpha=2", nil, nil,
			`Unknown query parameter "alpha"; use email.`},
		{http.MethodPost, "/v1/email/lists?zeta=1&alpha=2", "email\nann@acme.example\n", []string{"Content-Type", "text/csv"},
			`Unknown query parameter "alpha"; use column, name, webhook_url, callback_url and webhook_secret.`},
	} {
		for range 20 {
			r := b.call(c.method, c.path, std, c.body, c.headers...).want(t, http.StatusBadRequest, CodeInvalidRequest)
			if msg, _ := r.body["message"].(string); msg != c.says {
				t.Fatalf("%s %s: message %q, want %q", c.method, c.path, msg, c.says)
			}
		}
	}
}
