package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Every dashboard answer carries the headers of docs/dashboard.md ("Headers"), whatever kind it
// is: a page, a redirect, a refusal, a download or a static asset. Pages are never cached.
func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	anon := f.browser(t)
	b.signup("ann@example.com")
	answers := map[string]*http.Response{}
	get := func(c *browser, name, path string) {
		resp, _ := c.get(path)
		answers[name] = resp
	}
	get(anon, "sign-in page", "/dashboard/signin")
	get(anon, "redirect to sign-in", "/dashboard/keys")
	get(anon, "expired link", "/dashboard/reset?token=nope")
	get(b, "overview", "/dashboard/")
	get(b, "not found", "/dashboard/nope")
	get(b, "data export", "/dashboard/settings/data/export")
	get(b, "static asset", "/dashboard/static/app.js")
	answers["CSRF refusal"], _ = b.post("/dashboard/keys", url.Values{"label": {"x"}, "csrf": {"forged"}})
	answers["bad form"], _ = b.post("/dashboard/keys", url.Values{"label": {strings.Repeat("x", 3<<20)}})
	for name, resp := range answers {
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'self'", "object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("%s (%d): Content-Security-Policy %q lacks %s", name, resp.StatusCode, csp, d)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: Content-Security-Policy %q allows inline or eval'd script", name, csp)
		}
		for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"} {
			if got := h.Get(k); got != want {
				t.Errorf("%s (%d): %s = %q, want %q", name, resp.StatusCode, k, got, want)
			}
		}
		if cc := h.Get("Cache-Control"); name != "static asset" && cc != "no-store" {
			t.Errorf("%s (%d): Cache-Control %q, want no-store", name, resp.StatusCode, cc)
		}
	}
	if c := answers["CSRF refusal"].StatusCode; c != http.StatusForbidden {
		t.Errorf("CSRF refusal: %d", c)
	}
}
