package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// postFrom posts form to path as a browser does from a page of origin, with the headers it adds:
// Sec-Fetch-Site (site, "" for an older browser that sends only Origin) and Origin.
func (b *browser) postFrom(path string, form url.Values, site, origin string) *http.Response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	req.Header.Set("Origin", origin)
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// A form posted from another origin is refused before its token is looked at (docs/dashboard.md,
// "CSRF"). The case that matters: a page on another host of the same site (a sibling subdomain,
// which SameSite=Lax lets through) plants the sign-in form's double-submit cookie with a value it
// knows and posts the sign-in form with it, signing the visitor into the attacker's account (whose
// lists the visitor would then upload). The dashboard's own pages, and the public URL's origin
// behind a proxy that rewrites Host, still post.
func TestCrossOriginFormsRefused(t *testing.T) {
	f := newFixture(t, map[string]string{"MAILVET_PUBLIC_URL": "https://mailvet.example"})
	f.browser(t).signup("mallory@example.com")

	victim := f.browser(t)
	planted := strings.Repeat("P", 43)
	u, _ := url.Parse(f.srv.URL + "/dashboard/")
	victim.c.Jar.SetCookies(u, []*http.Cookie{{Name: csrfCookie, Value: planted, Path: "/dashboard"}})
	signin := url.Values{"csrf": {planted}, "email": {"mallory@example.com"}, "password": {testPassword}}
	for _, c := range []struct{ site, origin string }{
		{"same-site", "https://files.mailvet.example"},
		{"cross-site", "https://attacker.example"},
		{"", "https://files.mailvet.example"}, // a browser without Sec-Fetch-Site
	} {
		resp := victim.postFrom("/dashboard/signin", signin, c.site, c.origin)
		if resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
			t.Errorf("sign-in posted from %s (%q): %d, session cookie %v", c.origin, c.site, resp.StatusCode, sessionCookie(resp))
		}
	}

	ann := f.browser(t)
	ann.signup("ann@example.com")
	key := url.Values{"label": {"from elsewhere"}, "csrf": {ann.csrf("/dashboard/keys")}}
	if resp := ann.postFrom("/dashboard/keys", key, "same-site", "https://files.mailvet.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("key form posted from another origin: %d", resp.StatusCode)
	}
	if resp := ann.postFrom("/dashboard/keys", key, "same-origin", f.srv.URL); resp.StatusCode != http.StatusCreated {
		t.Errorf("key form posted from the dashboard: %d", resp.StatusCode)
	}
	key.Set("label", "behind a proxy")
	if resp := ann.postFrom("/dashboard/keys", key, "", "https://mailvet.example"); resp.StatusCode != http.StatusCreated {
		t.Errorf("key form posted from the public URL's origin: %d", resp.StatusCode)
	}
	if resp := victim.postFrom("/dashboard/signin", signin, "same-origin", f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("sign-in posted from the dashboard: %d", resp.StatusCode)
	}
}
