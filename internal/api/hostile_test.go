package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
)

// Requests a hostile or careless client sends, over a real connection to a real server: each
// answer must be the documented one in the envelope (docs/errors.md), never a 500, and must match
// /openapi.json.

// hostile is a test server over a real connection (raw headers and bytes reach it as sent) with
// a free account, its provisioning key and a standard key.
type hostile struct {
	b         *testBundle
	acct      account.Account
	key, mgmt string
	ts        *httptest.Server
}

func startHostile(t *testing.T) hostile {
	t.Helper()
	h := hostile{b: setup(t, nil)}
	h.acct, h.mgmt = h.b.account(plan.Free, "")
	h.key = h.b.standardKey(h.acct.ID).Raw
	h.ts = httptest.NewServer(h.b.srv.Handler())
	t.Cleanup(h.ts.Close)
	return h
}

// hostileCall sends one request to the test server ts and checks the answer against the spec.
// headers are name, value pairs, added (not set), so that a name may be given twice.
func hostileCall(t *testing.T, ts *httptest.Server, method, target, key string, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, clip(target), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, clip(target), clip(string(raw)), err)
		}
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
	return r
}

// DELETE /v1/email/history refuses an email parameter holding a NUL or bytes that are not UTF-8
// (docs/api.md, "DELETE /v1/email/history"), before it is normalised: Postgres cannot compare a
// NUL, and lower-casing would turn the bad bytes into U+FFFD and delete another address's data.
func TestDeleteHistoryRefusesNULAndInvalidUTF8(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	key, ts := h.key, h.ts

	for _, email := range []string{"ann%00@acme.test", "%00", "ann@acme.test%00", "%ff@acme.test", "ann@acme%C3%28.test", "%ED%A0%80@acme.test"} {
		r := hostileCall(t, ts, http.MethodDelete, "/v1/email/history?email="+email, key, "").want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "email") {
			t.Errorf("email=%s: message %q does not name the parameter", email, msg)
		}
	}
	// A well-formed address with characters beyond ASCII is still taken.
	r := hostileCall(t, ts, http.MethodDelete, "/v1/email/history?email=J%C3%BCrgen@B%C3%BCcher.test", key, "").want(t, http.StatusOK, "")
	if r.body["email"] != "jürgen@bücher.test" {
		t.Errorf("email %v, want jürgen@bücher.test", r.body["email"])
	}
}

// A refusal quotes the bad part of the request, but never more than a few dozen bytes of it
// (clip): a field name, a Content-Type or a query value of any length is cut, so that a 2 MB
// body is not answered with a 2 MB error.
func TestRefusalsDoNotEchoLongInput(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	key, mgmt, ts := h.key, h.mgmt, h.ts

	long := strings.Repeat("x", 100_000)
	const limit = 1024 // far above any message, far below the input
	cases := []struct {
		name, method, target, key, body string
		headers                         []string
	}{
		{"unknown field", http.MethodPost, "/v1/management/keys", mgmt, `{"label":"a","` + long + `":1}`, []string{"Content-Type", "application/json"}},
		{"unknown nested field", http.MethodPost, "/v1/management/keys", mgmt, `{"label":"a","` + long + `":{"b":1}}`, []string{"Content-Type", "application/json"}},
		{"field given twice", http.MethodPost, "/v1/management/keys", mgmt, `{"` + long + `":1,"` + long + `":1}`, []string{"Content-Type", "application/json"}},
		{"bad UTF-8 under a long name", http.MethodPost, "/v1/management/keys", mgmt, `{"` + long + `":"` + "\xff" + `"}`, []string{"Content-Type", "application/json"}},
		{"NUL in a long name", http.MethodPost, "/v1/management/keys", mgmt, `{"` + long + `\u0000":1}`, []string{"Content-Type", "application/json"}},
		{"NUL under a long name", http.MethodPost, "/v1/management/keys", mgmt, `{"` + long + `":"\u0000"}`, []string{"Content-Type", "application/json"}},
		{"JSON Content-Type", http.MethodPost, "/v1/management/keys", mgmt, `{"label":"a"}`, []string{"Content-Type", long}},
		{"list Content-Type", http.MethodPost, "/v1/email/lists", key, "email\nann@acme.test\n", []string{"Content-Type", long}},
		{"list query parameter", http.MethodPost, "/v1/email/lists?" + long + "=1", key, "email\nann@acme.test\n", []string{"Content-Type", "text/csv"}},
		{"results format", http.MethodGet, "/v1/email/lists/019ab3c2-0000-7000-8000-000000000000/results?format=" + long, key, "", nil},
		{"results status", http.MethodGet, "/v1/email/lists/019ab3c2-0000-7000-8000-000000000000/results?status=" + long, key, "", nil},
		{"results escape_formulas", http.MethodGet, "/v1/email/lists/019ab3c2-0000-7000-8000-000000000000/results?escape_formulas=" + long, key, "", nil},
		{"deliveries status", http.MethodGet, "/v1/management/deliveries?status=" + long, mgmt, "", nil},
	}
	for _, c := range cases {
		r := hostileCall(t, ts, c.method, c.target, c.key, c.body, c.headers...).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if len(r.raw) > limit {
			t.Errorf("%s: a %d-byte answer to a %d-byte value: %s…", c.name, len(r.raw), len(long), r.raw[:300])
		}
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "xxxx…") {
			t.Errorf("%s: message %q does not quote the start of the value", c.name, msg)
		}
	}
}

// The Mailvet-Webhook-Secret header of a list upload counts once and not empty (docs/lists.md,
// "Bad input"), as the query parameters do: of two values one would sign and the other be
// dropped, and an empty one would run the list unsigned.
func TestListUploadRefusesAnAmbiguousSecretHeader(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	b, acct, key, ts := h.b, h.acct, h.key, h.ts

	const target = "/v1/email/lists?webhook_url=https://hooks.example.com/lists"
	const file = "email\nann@acme.test\n"
	for name, secrets := range map[string][]string{
		"two values":     {"first secret", "second secret"},
		"the same twice": {"first secret", "first secret"},
		"empty":          {""},
	} {
		headers := []string{"Content-Type", "text/csv"}
		for _, s := range secrets {
			headers = append(headers, "Mailvet-Webhook-Secret", s)
		}
		r := hostileCall(t, ts, http.MethodPost, target, key, file, headers...).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "Mailvet-Webhook-Secret") {
			t.Errorf("%s: message %q does not name the header", name, msg)
		}
	}
	var lists int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM lists WHERE account_id = $1`, acct.ID).Scan(&lists))
	if lists != 0 {
		t.Errorf("%d lists stored, want none", lists)
	}
	// One header with a value is still taken: TestListUploadVerifyDownloadDelete sends one.
}

// A path with an escaped slash is not the path with a slash: Echo routes the raw path, so
// /v1/email/lists%2f{id} matches no route and is 404 not_found whatever the method. The search
// for other methods (a 405's Allow) looks up the same raw path: the decoded one would answer GET
// with 405 and "Allow: DELETE", although GET is what /v1/email/lists/{id} takes.
func TestEscapedSlashIsNotFoundUnderEveryMethod(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	key, mgmt, ts := h.key, h.mgmt, h.ts

	const id = "019ab3c2-0000-7000-8000-000000000000"
	for _, c := range []struct{ method, target, key string }{
		{http.MethodGet, "/v1/email/lists%2f" + id, key},
		{http.MethodDelete, "/v1/email/lists%2F" + id, key},
		{http.MethodGet, "/v1/email/lists%2f" + id + "%2fresults", key},
		{http.MethodGet, "/v1/email/verify%2fbatch", key},
		{http.MethodPost, "/v1/management/keys%2f" + id, mgmt},
	} {
		r := hostileCall(t, ts, c.method, c.target, c.key, "")
		if r.status != http.StatusNotFound {
			t.Errorf("%s %s: %d (Allow %q), want 404", c.method, c.target, r.status, r.header.Get("Allow"))
			continue
		}
		assertEnvelope(t, r.body, CodeNotFound)
	}
	// The real paths keep their 405 with the methods they take.
	r := hostileCall(t, ts, http.MethodPut, "/v1/email/lists/"+id, key, "").want(t, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "GET, HEAD, DELETE" {
		t.Errorf("PUT /v1/email/lists/{id}: Allow %q, want GET, HEAD, DELETE", allow)
	}
}
