package dashboard

import (
	"net/http"
	"net/url"
	"slices"
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
		for _, d := range []string{"default-src 'self'", "object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("%s (%d): Content-Security-Policy %q lacks %s", name, resp.StatusCode, csp, d)
			}
		}
		if fa := directive(csp, "form-action"); fa != "'self' https://checkout.stripe.com https://billing.stripe.com" {
			t.Errorf("%s: forms may post to %q, want only the dashboard and Stripe's hosted pages", name, fa)
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

// directive is the value of the Content-Security-Policy directive name in csp.
func directive(csp, name string) string {
	for _, d := range strings.Split(csp, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(d), name+" "); ok {
			return v
		}
	}
	return ""
}

// The billing buttons are answered with a redirect to Stripe's page when the dashboard's
// form-action allows its origin (a browser refuses a form's redirect anywhere else), and with a
// page that links to it otherwise, as for a Stripe account on its own domain.
func TestStripeOutsideFormActionIsALink(t *testing.T) {
	for _, c := range []struct{ origin, want string }{
		{"", "https://checkout.stripe.com/c/pay/cs_1"},
		{"https://pay.example.com", "https://pay.example.com/c/pay/cs_1"},
	} {
		f := newFixture(t, nil)
		f.h.checkout = &fakeCheckout{origin: c.origin}
		b := f.browser(t)
		b.signup("ann@example.com")
		resp, body := b.post("/dashboard/billing/checkout", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "tier": {"builder"}})
		allowed := strings.Fields(directive(resp.Header.Get("Content-Security-Policy"), "form-action"))
		u, _ := url.Parse(c.want)
		switch {
		case slices.Contains(allowed, u.Scheme+"://"+u.Host):
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != c.want {
				t.Errorf("%s, allowed by form-action: %d to %q, want 303 to %s", u.Host, resp.StatusCode, resp.Header.Get("Location"), c.want)
			}
		default:
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" || !strings.Contains(body, `<a id="to-stripe" href="`+c.want+`">`) {
				t.Errorf("%s, not allowed by form-action: %d Location %q, want a page linking to %s:\n%s", u.Host, resp.StatusCode, resp.Header.Get("Location"), c.want, body)
			}
		}
	}
}
