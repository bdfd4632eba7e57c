package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// One client address makes at most maxAddressSignups accounts a day, however many it sends at
// once; sign-ups that make no account (a taken email) do not count, a refused one counts as no
// failed sign-in, and another address is not held back.
func TestSignupsPerAddressAreLimited(t *testing.T) {
	f := newFixture(t, map[string]string{"MAILVET_TRUSTED_PROXIES": "127.0.0.0/8"})
	from := func(addr string) *browser {
		b := f.browser(t)
		b.c.Transport = forwardedFor{addr}
		return b
	}
	f.signupFrom(t, from("198.51.100.7"), "taken@example.com", http.StatusSeeOther)
	// A sign-up of a taken email with its right password signs in and gives its count back.
	f.signupFrom(t, from("198.51.100.7"), "Taken@example.com", http.StatusSeeOther)

	const n = 2 * maxAddressSignups
	got := atOnce(n, func(i int) func() int {
		b := from("198.51.100.7")
		token := b.csrf("/dashboard/signup")
		return func() int {
			resp, body := b.post("/dashboard/signup", url.Values{"csrf": {token}, "email": {fmt.Sprintf("user%d@example.com", i)},
				"password": {testPassword}, "password_confirm": {testPassword}})
			if resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(body, "Too many accounts were created from your network today") {
				t.Errorf("refused sign-up without its message: %s", body)
			}
			return resp.StatusCode
		}
	})
	// The first account was made by this address too.
	if got[http.StatusSeeOther] != maxAddressSignups-1 || got[http.StatusTooManyRequests] != n-maxAddressSignups+1 {
		t.Fatalf("%d concurrent sign-ups from one address: %v; want %d made, the rest refused", n, got, maxAddressSignups-1)
	}
	var users, failures int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dashboard_users`).Scan(&users), "users")
	if users != maxAddressSignups {
		t.Fatalf("%d accounts, want %d", users, maxAddressSignups)
	}
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT coalesce(sum(failures), 0) FROM dashboard_signin_failures
		WHERE subject NOT LIKE 'signup:%'`).Scan(&failures), "failures")
	if failures != 0 {
		t.Fatalf("%d failed sign-ins counted for sign-ups", failures)
	}
	// The address is full for the day; another is not held back, and its sign-in still works.
	f.signupFrom(t, from("198.51.100.7"), "one-more@example.com", http.StatusTooManyRequests)
	f.signupFrom(t, from("203.0.113.5"), "elsewhere@example.com", http.StatusSeeOther)
	b := from("198.51.100.7")
	if resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"taken@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in from a full address: %d", resp.StatusCode)
	}
}

func (f *fixture) signupFrom(t *testing.T, b *browser, email string, want int) {
	t.Helper()
	resp, body := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {email},
		"password": {testPassword}, "password_confirm": {testPassword}})
	if resp.StatusCode != want {
		t.Fatalf("sign-up of %s: %d, want %d\n%s", email, resp.StatusCode, want, body)
	}
}

// forwardedFor sends every request as if a trusted proxy forwarded it for addr.
type forwardedFor struct{ addr string }

func (f forwardedFor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	return http.DefaultTransport.RoundTrip(r)
}
