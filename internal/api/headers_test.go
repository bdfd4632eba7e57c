package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/plan"
)

// dashboardHeaders are the headers every answer under /dashboard carries (docs/security.md,
// "HTTP headers"; the dashboard's own answers are checked by its
// TestEveryAnswerCarriesTheSecurityHeaders).
var dashboardHeaders = []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy", "Cache-Control"}

// The answers under the dashboard's paths that its handler never makes carry its headers too:
// Echo's refusal of a method it does not route and the dashboard's router's answer to a path
// beside its pages; and so does its page refusing a body over 2 MB
// (TestDashboardFormOverTheBodyLimitGetsThePage).
func TestEchoAnswersUnderTheDashboardCarryItsHeaders(t *testing.T) {
	t.Parallel()
	h := newBareServer(t).Handler()
	page, _ := serve(h, httptest.NewRequest(http.MethodGet, "/dashboard/no-such-page", nil))
	if page.StatusCode != http.StatusNotFound || !strings.Contains(page.Header.Get("Content-Security-Policy"), "form-action 'self'") {
		t.Fatalf("the dashboard's own 404 page: %d, Content-Security-Policy %q", page.StatusCode, page.Header.Get("Content-Security-Policy"))
	}
	big := httptest.NewRequest(http.MethodPost, "/dashboard/signin", strings.NewReader(strings.Repeat("x", MaxBodyBytes+1)))
	big.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
	}{
		{"a method Echo does not route", httptest.NewRequest("PURGE", "/dashboard/signin", nil), http.StatusMethodNotAllowed},
		{"a body over 2 MB", big, http.StatusRequestEntityTooLarge},
		{"a path beside the dashboard's", httptest.NewRequest(http.MethodGet, "/dashboard.php", nil), http.StatusNotFound},
	} {
		resp, body := serve(h, c.req)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, resp.StatusCode, c.status, body)
		}
		for _, k := range dashboardHeaders {
			if got, want := resp.Header.Get(k), page.Header.Get(k); got != want {
				t.Errorf("%s (%d): %s = %q, want the dashboard's %q", c.name, resp.StatusCode, k, got, want)
			}
		}
	}
}

// With an https public URL every answer tells browsers to use https only, for a year (HSTS),
// the dashboard's and the API's, refusals included; with an http one (local development) none
// does (docs/security.md, "HTTP headers").
func TestStrictTransportSecurityFollowsThePublicURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		publicURL, want string
	}{
		{"https://api.example.com", "max-age=31536000"},
		{"HTTPS://api.example.com:8443/", "max-age=31536000"},
		{"http://localhost:8080", ""},
		{"", ""}, // the default: http://localhost and the port
	} {
		cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
			if k == "MAILVET_PUBLIC_URL" {
				return c.publicURL
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		h := New(Deps{Config: cfg, Log: app.NewLogger(io.Discard, "test"), Ready: health.NewChecker(0)}).Handler()
		for _, req := range []*http.Request{
			httptest.NewRequest(http.MethodGet, "/healthz", nil),
			httptest.NewRequest(http.MethodGet, "/openapi.json", nil),
			httptest.NewRequest(http.MethodGet, "/docs/errors", nil),
			httptest.NewRequest(http.MethodGet, "/", nil),
			httptest.NewRequest(http.MethodGet, "/v1/email/jobs/x", nil), // 401: no key
			httptest.NewRequest(http.MethodGet, "/v1/nope", nil),
			httptest.NewRequest(http.MethodGet, "/dashboard/no-such-page", nil),
			httptest.NewRequest(http.MethodGet, "/dashboard/static/app.js", nil),
			httptest.NewRequest("PURGE", "/dashboard/signin", nil),
		} {
			resp, _ := serve(h, req)
			if got := resp.Header.Get("Strict-Transport-Security"); got != c.want {
				t.Errorf("public URL %q: %s %s (%d): Strict-Transport-Security %q, want %q",
					c.publicURL, req.Method, req.URL.Path, resp.StatusCode, got, c.want)
			}
		}
	}
}

// Every answer is X-Content-Type-Options: nosniff, so that no browser reads a JSON answer, a
// download or an error quoting the client's text as HTML: the API's, the public documents',
// Echo's own refusals and the account export (docs/security.md, "HTTP headers"). /openapi.json
// declares the header required, so every test that checks a response against it checks it too.
func TestEveryAnswerIsNosniff(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, key := b.account(plan.Free, "")
	big := httptest.NewRequest(http.MethodPost, "/v1/email/verify", strings.NewReader(strings.Repeat("x", MaxBodyBytes+1)))
	export := httptest.NewRequest(http.MethodGet, "/v1/management/account/export", nil)
	export.Header.Set("Authorization", "Bearer "+key)
	keys := httptest.NewRequest(http.MethodPost, "/v1/management/keys", strings.NewReader(`{"label": "ci"}`))
	keys.Header.Set("Authorization", "Bearer "+key)
	keys.Header.Set("Content-Type", "application/json")
	for _, c := range []struct {
		req    *http.Request
		status int
	}{
		{httptest.NewRequest(http.MethodGet, "/healthz", nil), http.StatusOK},
		{httptest.NewRequest(http.MethodGet, "/openapi.json", nil), http.StatusOK},
		{httptest.NewRequest(http.MethodGet, "/docs/errors", nil), http.StatusOK},
		{httptest.NewRequest(http.MethodGet, "/", nil), http.StatusFound},
		{httptest.NewRequest(http.MethodGet, "/v1/nope", nil), http.StatusNotFound},
		{httptest.NewRequest(http.MethodPost, "/healthz", nil), http.StatusMethodNotAllowed},
		{httptest.NewRequest(http.MethodGet, "/v1/email/jobs/x", nil), http.StatusUnauthorized},
		{big, http.StatusRequestEntityTooLarge},
		{export, http.StatusOK},
		{keys, http.StatusCreated},
		{httptest.NewRequest(http.MethodGet, "/dashboard/signin", nil), http.StatusOK},
	} {
		resp, body := serve(b.srv.Handler(), c.req)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d: %.200s", c.req.Method, c.req.URL.Path, resp.StatusCode, c.status, body)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q, want nosniff", c.req.Method, c.req.URL.Path, resp.StatusCode, got)
		}
		// Keys, exports and refusals are the customer's own (docs/api.md, "Conventions").
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" && c.req.URL.Path != "/openapi.json" && c.req.URL.Path != "/docs/errors" {
			t.Errorf("%s %s (%d): Cache-Control %q, want no-store", c.req.Method, c.req.URL.Path, resp.StatusCode, cc)
		}
	}
}
