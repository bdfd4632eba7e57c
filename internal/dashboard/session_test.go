package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
)

// A session ends after MAILVET_DASHBOARD_SESSION_IDLE (1 hour by default) without a request, even
// well within its 12 hours: a browser left signed in on a shared machine does not stay signed in
// for the day. Each request pushes the deadline on; the lifetime from sign-in still bounds it;
// Sweep deletes idle sessions nobody comes back to (docs/dashboard.md, "Sessions").
func TestSessionIdleTimeout(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newFixture(t, nil, func(d *Deps) { d.Now = clock.Now })
	b := f.browser(t)
	b.signup("ann@example.com")
	page := func() *http.Response {
		t.Helper()
		resp, _ := b.get("/dashboard/settings")
		return resp
	}
	for range 3 { // used every 50 minutes, the session lasts past its first hour
		clock.Add(50 * time.Minute)
		if resp := page(); resp.StatusCode != http.StatusOK {
			t.Fatalf("session used every 50 minutes: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	clock.Add(61 * time.Minute)
	if resp := page(); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/signin?ended=1&next=%2Fdashboard%2Fsettings" {
		t.Fatalf("session idle for 61 minutes: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	var n int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&n), "count")
	if n != 0 {
		t.Fatalf("%d sessions left after the idle timeout", n)
	}

	// The lifetime still ends a session in use.
	b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {testPassword}})
	for range 14 {
		clock.Add(55 * time.Minute)
		page()
	}
	if resp := page(); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("session used for 12 h 50 min: %d", resp.StatusCode)
	}

	// Sweep deletes a session idle too long that nobody comes back to.
	b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {testPassword}})
	clock.Add(61 * time.Minute)
	if _, err := Sweep(context.Background(), f.pool, clock.Now()); err != nil {
		t.Fatal(err)
	}
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&n), "count")
	if n != 0 {
		t.Fatalf("%d idle sessions left after Sweep", n)
	}
}

// A sign-in in a browser that holds another session (a sign-in page opened in a second tab
// before the first signed in, a switch to another account) ends the session it replaces: the
// cookie is overwritten, and a session no browser holds must not stay usable to a copy of its
// token (docs/dashboard.md, "Sessions").
func TestSigninEndsTheSessionItReplaces(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signup("bob@example.com")
	b := f.browser(t)
	b.signup("ann@example.com")
	u, _ := url.Parse(f.srv.URL + "/dashboard/")
	var old string
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == SessionCookie {
			old = c.Value
		}
	}
	if old == "" {
		t.Fatal("no session cookie after sign-up")
	}
	// The sign-in form of a tab opened before: its double-submit token is the browser's.
	csrf := ""
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == csrfCookie {
			csrf = c.Value
		}
	}
	resp, body := b.post("/dashboard/signin", url.Values{"csrf": {csrf}, "email": {"bob@example.com"}, "password": {testPassword}})
	if resp.StatusCode != http.StatusSeeOther || sessionCookie(resp) == nil {
		t.Fatalf("sign-in as bob: %d\n%s", resp.StatusCode, body)
	}
	var n int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions WHERE token_hash = $1`,
		tokenHash(old)).Scan(&n), "count")
	if n != 0 {
		t.Fatal("ann's session outlived the sign-in that replaced it in the browser")
	}
}
