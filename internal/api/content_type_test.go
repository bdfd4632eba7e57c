package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

// sendContentTypes posts body to path with key and one Content-Type header per value of cts, and
// checks the answer against /openapi.json.
func (b *testBundle) sendContentTypes(path, key, body string, cts ...string) reply {
	b.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for _, ct := range cts {
		req.Header.Add("Content-Type", ct)
	}
	return replyOf(b.t, b.srv.Handler(), req)
}

// replyOf serves req and returns its reply, checked against /openapi.json.
func replyOf(t testing.TB, h http.Handler, req *http.Request) reply {
	t.Helper()
	resp, raw := serve(h, req)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", req.Method, req.URL.Path, raw, err)
		}
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
	return r
}

// A request with two Content-Type headers is refused, whichever comes first and even when both
// agree: the server would read the first, and the body may be in the other (docs/errors.md,
// "invalid_request"). Nothing is created.
func TestContentTypeSentTwiceIsRefused(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, std := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	for _, c := range []struct {
		path, key, body string
		cts             []string
	}{
		{"/v1/email/verify", std, `{"email":"ann@acme.test","webhook_url":"https://hooks.example.com/x"}`, []string{"application/json", "text/plain"}},
		{"/v1/email/verify", std, `{"email":"ann@acme.test","webhook_url":"https://hooks.example.com/x"}`, []string{"text/plain", "application/json"}},
		{"/v1/management/keys", mgmt, `{"label":"prod"}`, []string{"application/json", "application/json; charset=latin1"}},
		{"/v1/management/keys", mgmt, `{"label":"prod"}`, []string{"application/json", "application/json"}},
		{"/v1/email/lists", std, "email\nann@acme.test\n", []string{"text/csv", "text/plain"}},
	} {
		r := b.sendContentTypes(c.path, c.key, c.body, c.cts...).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "Content-Type") || !strings.Contains(msg, "once") {
			t.Errorf("%s with Content-Type %q: message %q does not name the header", c.path, c.cts, msg)
		}
	}
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct); n != 1 {
		t.Errorf("%d standard keys, want the fixture's only", n)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct) + b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d jobs and lists stored from refused requests", n)
	}
	// One header is what every route takes.
	b.sendContentTypes("/v1/management/keys", mgmt, `{"label":"prod"}`, "application/json").want(t, http.StatusCreated, "")
	b.sendContentTypes("/v1/email/lists", std, "email\nann@acme.test\n", "text/csv").want(t, http.StatusAccepted, "")
}

// A JSON body is read as UTF-8 only (docs/api.md, "Conventions"): a Content-Type naming another
// charset is refused, naming it, rather than read as UTF-8 — the latin1 bytes of "cafÃ©" are the
// UTF-8 bytes of "café", and would make that label. charset=utf-8 is fine in any case.
func TestJSONBodyInAnotherCharsetIsRefused(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, std := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	const label = "{\"label\":\"caf\xc3\xa9\"}"
	for _, cs := range []string{"latin1", "ISO-8859-1", "windows-1252", "utf-16", `"us-ascii"`} {
		r := b.sendContentTypes("/v1/management/keys", mgmt, label, "application/json; charset="+cs).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "charset") || !strings.Contains(msg, strings.Trim(cs, `"`)) {
			t.Errorf("charset=%s: message %q does not name the charset", cs, msg)
		}
	}
	r := b.sendContentTypes("/v1/email/verify", std, `{"email":"ann@acme.test"}`, "application/json;charset=latin1").
		want(t, http.StatusBadRequest, CodeInvalidRequest)
	if msg, _ := r.body["message"].(string); !strings.Contains(msg, `charset "latin1"`) {
		t.Errorf("verify with charset=latin1: message %q", msg)
	}
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct); n != 1 {
		t.Errorf("%d standard keys, want the fixture's only", n)
	}
	for _, cs := range []string{"utf-8", "UTF-8", `"Utf-8"`} {
		r := b.sendContentTypes("/v1/management/keys", mgmt, label, "application/json; charset="+cs).want(t, http.StatusCreated, "")
		if r.body["label"] != "café" {
			t.Errorf("charset=%s: label %q", cs, r.body["label"])
		}
	}
}
