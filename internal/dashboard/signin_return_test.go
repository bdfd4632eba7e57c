package dashboard

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// After a session ends, the sign-in page says so, and signing in returns to the page the user
// was on; a "next" that is not a local dashboard page is ignored.
func TestSigninReturnsToThePageAfterSessionEnded(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	pgExecSessionsExpire(t, f)
	resp, _ := b.get("/dashboard/deliveries?state=failed")
	signin := resp.Header.Get("Location")
	resp, body := b.get(signin)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Your session ended; sign in again.") ||
		!strings.Contains(html.UnescapeString(body), `name="next" value="/dashboard/deliveries?state=failed"`) {
		t.Fatalf("sign-in page after expiry (%s): %d\n%s", signin, resp.StatusCode, body)
	}
	csrf := b.csrf("/dashboard/signin")
	form := url.Values{"csrf": {csrf}, "email": {"ann@example.com"}, "password": {"wrong password!"}, "next": {"/dashboard/deliveries?state=failed"}}
	if _, body := b.post("/dashboard/signin", form); !strings.Contains(html.UnescapeString(body), `name="next" value="/dashboard/deliveries?state=failed"`) {
		t.Fatalf("a failed sign-in lost the page to return to:\n%s", body)
	}
	form.Set("password", testPassword)
	if resp, _ := b.post("/dashboard/signin", form); resp.Header.Get("Location") != "/dashboard/deliveries?state=failed" {
		t.Fatalf("sign-in went to %q", resp.Header.Get("Location"))
	}
	for _, next := range []string{"//evil.example/", "https://evil.example/dashboard/", "/dashboard/../x"} {
		b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/")}})
		form.Set("csrf", b.csrf("/dashboard/signin"))
		form.Set("next", next)
		if resp, _ := b.post("/dashboard/signin", form); resp.Header.Get("Location") != "/dashboard/" {
			t.Errorf("sign-in with next %q went to %q", next, resp.Header.Get("Location"))
		}
	}
	// A plain sign-in page says nothing about an ended session.
	b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/")}})
	if _, body := b.get("/dashboard/signin"); strings.Contains(body, "session ended") {
		t.Fatal("the plain sign-in page says the session ended")
	}
}

// Signing out in one tab leaves the ended-session cookie, so another tab's next request is told
// that its session ended (and sent back to its page after signing in), not greeted as a stranger.
func TestOtherTabAfterSignoutIsToldTheSessionEnded(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/keys")}})
	resp, _ := b.get("/dashboard/keys")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/dashboard/signin?ended=1&next=%2Fdashboard%2Fkeys" {
		t.Fatalf("another tab after sign-out: %d %q", resp.StatusCode, loc)
	}
	// The notice is said once: that redirect deleted the cookie.
	if resp, _ := b.get("/dashboard/keys"); resp.Header.Get("Location") != "/dashboard/signin?next=%2Fdashboard%2Fkeys" {
		t.Fatalf("second request: %q", resp.Header.Get("Location"))
	}
}
