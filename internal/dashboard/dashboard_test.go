package dashboard

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/mailer"
	"github.com/mailvet/mailvet/internal/mailsink"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

type fixture struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
	h    *Handler
	svc  *testService
	// refusals are the refusals the dashboard reported for metering (Deps.Refused).
	refusals chan Refusal
	// sink is the fixture's mail relay: every mail the dashboard sends arrives here.
	sink *mailsink.Sink
}

func newFixture(t *testing.T, env map[string]string, adjust ...func(*Deps)) *fixture {
	t.Helper()
	cfg := testConfig(t, env)
	pool := pgtest.New(t)
	sink, relay := testMail(t)
	f := &fixture{pool: pool, svc: newTestService(t, loadConfig(t, env), pool), refusals: make(chan Refusal, 64), sink: sink}
	d := Deps{Config: cfg, Pool: pool, Verify: f.svc, Mailer: relay, Refused: func(r Refusal) {
		select {
		case f.refusals <- r:
		default:
		}
	}}
	for _, a := range adjust {
		a(&d)
	}
	f.h = New(d)
	t.Cleanup(f.h.WaitMail)                                 // before the sink and the database go
	f.h.hasher = hasher{time: 1, memoryKiB: 64, threads: 1} // the format is the same; tests need not pay 19 MiB a hash
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	return f
}

// testMail starts a mail sink for a test and returns it with a relay that sends to it.
func testMail(t *testing.T) (*mailsink.Sink, *mailer.Relay) {
	t.Helper()
	sink, err := mailsink.Start("127.0.0.1:0", mailsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	return sink, mailer.New(mailer.Config{Addr: sink.Addr(), From: "noreply@mailvet.test"})
}

// browser is a client with its own cookie jar that does not follow redirects.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	sink *mailsink.Sink
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: f.srv.URL, sink: f.sink, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// mail waits for the next mail to email in the fixture's sink and returns it with the path and
// query of its one dashboard link, to be opened on the test server (the link itself starts with
// MAILVET_PUBLIC_URL).
func (b *browser) mail(email string) (mailsink.Message, string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.t.Context(), 10*time.Second)
	defer cancel()
	m, err := b.sink.Next(ctx, email)
	if err != nil {
		b.t.Fatal(err)
	}
	links := m.Links()
	if len(links) != 1 {
		b.t.Fatalf("mail to %s has %d links, want 1:\n%s", email, len(links), m.Body)
	}
	u, err := url.Parse(links[0])
	if err != nil {
		b.t.Fatal(err)
	}
	return m, u.RequestURI()
}

var tokenFieldRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// confirmEmail opens the confirmation link mailed to email and presses its button.
func (b *browser) confirmEmail(email string) {
	b.t.Helper()
	_, link := b.mail(email)
	resp, body := b.get(link)
	m, c := tokenFieldRE.FindStringSubmatch(body), csrfRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || c == nil {
		b.t.Fatalf("confirmation page %s: %d\n%s", link, resp.StatusCode, body)
	}
	resp, body = b.post("/dashboard/confirm", url.Values{"csrf": {c[1]}, "token": {html.UnescapeString(m[1])}})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("confirm %s: %d\n%s", email, resp.StatusCode, body)
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) get(path string) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// csrf reads the CSRF token from the form on path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	_, body := b.get(path)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no CSRF token on %s", path)
	}
	return m[1]
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

const testPassword = "a long enough password"

// signup signs email up and confirms it through the link mailed to the fixture's sink, as its
// owner would.
func (b *browser) signup(email string) {
	b.t.Helper()
	b.signupUnconfirmed(email)
	b.confirmEmail(email)
}

// signupUnconfirmed signs email up and leaves the mailed link unopened.
func (b *browser) signupUnconfirmed(email string) {
	b.t.Helper()
	resp, body := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {email},
		"password": {testPassword}, "password_confirm": {testPassword}})
	if resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("sign-up of %s: %d\n%s", email, resp.StatusCode, body)
	}
}

func (f *fixture) accountOf(t *testing.T, email string) string {
	t.Helper()
	var id string
	if err := f.pool.QueryRow(context.Background(), `SELECT account_id FROM dashboard_users WHERE email = $1`, email).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	return nil
}

// The session cookie is HttpOnly and SameSite=Lax, scoped to /dashboard, and Secure when the
// public URL is https, in any case; the table holds the token's hash, never the token.
func TestSessionCookieFlags(t *testing.T) {
	for _, public := range []string{"http://localhost:8080", "https://mailvet.example", "HTTPS://mailvet.example"} {
		f := newFixture(t, map[string]string{"MAILVET_PUBLIC_URL": public})
		b := f.browser(t)
		resp, _ := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {"ann@example.com"},
			"password": {testPassword}, "password_confirm": {testPassword}})
		c := sessionCookie(resp)
		if c == nil {
			t.Fatalf("%s: no session cookie", public)
		}
		if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/dashboard" || c.Secure != strings.HasPrefix(strings.ToLower(public), "https") {
			t.Errorf("%s: cookie %+v", public, c)
		}
		var stored int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions WHERE token_hash = $1`,
			tokenHash(c.Value)).Scan(&stored); err != nil || stored != 1 {
			t.Errorf("%s: session stored by hash: %d %v", public, stored, err)
		}
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions WHERE token_hash = $1`,
			[]byte(c.Value)).Scan(&stored); err != nil || stored != 0 {
			t.Errorf("%s: raw token stored", public)
		}
	}
	// A request over TLS gets Secure cookies even with an http public URL.
	f := newFixture(t, nil)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "https://mailvet.example/dashboard/signin", nil)
	f.h.ServeHTTP(rec, req)
	if cs := rec.Result().Cookies(); len(cs) != 1 || !cs[0].Secure || !cs[0].HttpOnly {
		t.Errorf("CSRF cookie over TLS: %+v", cs)
	}
}

// Every POST without the right CSRF token is refused before it does anything.
func TestCSRFRejection(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	// Sign-up without the token of the csrf cookie.
	if resp, _ := b.post("/dashboard/signup", url.Values{"email": {"ann@example.com"}, "password": {testPassword},
		"password_confirm": {testPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-up without CSRF: %d", resp.StatusCode)
	}
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	for _, form := range []url.Values{{"label": {"x"}}, {"label": {"x"}, "csrf": {"forged"}},
		{"label": {"x"}, "csrf": {strings.Repeat("A", 43)}}} {
		if resp, _ := b.post("/dashboard/keys", form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("create key with csrf %q: %d", form.Get("csrf"), resp.StatusCode)
		}
	}
	for _, path := range []string{"/dashboard/keys/provisioning", "/dashboard/billing/spend-cap", "/dashboard/signout",
		"/dashboard/settings/password", "/dashboard/playground"} {
		if resp, _ := b.post(path, url.Values{"cap_eur": {"5"}}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without CSRF: %d", path, resp.StatusCode)
		}
	}
	var keys int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1`, acct).Scan(&keys)
	if keys != 0 {
		t.Fatalf("%d keys created by forged requests", keys)
	}
	// Another session's token is no good either.
	other := f.browser(t)
	other.signup("bob@example.com")
	if resp, _ := b.post("/dashboard/keys", url.Values{"label": {"x"}, "csrf": {other.csrf("/dashboard/keys")}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another session's CSRF token: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/keys", url.Values{"label": {"ok"}, "csrf": {b.csrf("/dashboard/keys")}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("with the right token: %d", resp.StatusCode)
	}
}

// An expired session sends the browser to sign-in, and its row goes.
func TestSessionExpiry(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	if resp, _ := b.get("/dashboard/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("fresh session: %d", resp.StatusCode)
	}
	pgtest.Exec(t, f.pool, `UPDATE dashboard_sessions SET expires_at = now() - interval '1 second'`)
	resp, _ := b.get("/dashboard/")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/signin?ended=1" {
		t.Fatalf("expired session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	var n int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d sessions left after expiry", n)
	}
	// Signing out ends the session on the server, not only in the browser.
	b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {testPassword}})
	b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/")}})
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d sessions left after sign-out", n)
	}
}

// Five failures make the next attempt from that address wait, even with the right password; an
// unknown email gets exactly the same answers as a known one.
func TestSigninThrottlingWithoutEnumeration(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signup("ann@example.com")
	try := func(email, password string) (int, string) {
		b := f.browser(t)
		resp, body := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {email}, "password": {password}})
		msg := regexp.MustCompile(`id="error">([^<]*)<`).FindStringSubmatch(body)
		if msg == nil {
			return resp.StatusCode, ""
		}
		return resp.StatusCode, msg[1]
	}
	for i := range maxAccountFailures {
		known, knownMsg := try("ann@example.com", "wrong password "+string(rune('a'+i)))
		unknown, unknownMsg := try("nobody@example.com", "wrong password "+string(rune('a'+i)))
		if known != http.StatusUnauthorized || known != unknown || knownMsg != unknownMsg || knownMsg != msgWrongCredentials {
			t.Fatalf("attempt %d: known %d %q, unknown %d %q", i+1, known, knownMsg, unknown, unknownMsg)
		}
	}
	code, msg := try("ANN@example.com", testPassword) // the same account, whatever the case
	if code != http.StatusTooManyRequests || msg != throttledText(pairDelay.base) {
		t.Fatalf("sixth attempt with the right password: %d %q", code, msg)
	}
	if code2, msg2 := try("nobody@example.com", testPassword); code2 != code || msg2 != msg {
		t.Fatalf("unknown email when throttled: %d %q", code2, msg2)
	}
	// After the delay the right password works again.
	pgtest.Exec(t, f.pool, `UPDATE dashboard_signin_failures SET window_start = now() - interval '31 seconds'`)
	if code, msg := try("ann@example.com", testPassword); code != http.StatusSeeOther {
		t.Fatalf("after the delay: %d %q", code, msg)
	}
	// The address limit holds across emails.
	pgtest.Exec(t, f.pool, `UPDATE dashboard_signin_failures SET failures = $1, window_start = now() WHERE subject LIKE 'ip:%'`, maxAddressFailures)
	if code, _ := try("someone@example.com", "whatever password"); code != http.StatusTooManyRequests {
		t.Fatalf("address over its limit: %d", code)
	}
}

// Wrong passwords sent at the same moment are held to the limit too: each attempt is counted
// before its password is checked, so 40 at once check at most five. Right passwords and new
// accounts are not counted as failures.
func TestSigninThrottleHoldsUnderConcurrency(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signup("ann@example.com") // a new account: refunded, not a failure
	b := f.browser(t)
	csrf := b.csrf("/dashboard/signin")
	if resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {csrf}, "email": {"ann@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("right password: %d", resp.StatusCode)
	}
	var failures int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT coalesce(sum(failures), 0) FROM dashboard_signin_failures
		WHERE subject NOT LIKE 'signup:%'`).Scan(&failures), "count")
	if failures != 0 {
		t.Fatalf("%d failures counted for a sign-up and a right sign-in", failures)
	}

	const n = 40
	got := atOnce(n, func(i int) func() int {
		c := f.browser(t)
		token := c.csrf("/dashboard/signin")
		return func() int {
			resp, _ := c.post("/dashboard/signin", url.Values{"csrf": {token}, "email": {"ann@example.com"}, "password": {fmt.Sprintf("wrong password %d", i)}})
			return resp.StatusCode
		}
	})
	if got[http.StatusUnauthorized] > maxAccountFailures || got[http.StatusUnauthorized]+got[http.StatusTooManyRequests] != n {
		t.Fatalf("40 concurrent wrong passwords: %v; at most %d may be checked, the rest refused", got, maxAccountFailures)
	}
	var acct int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT failures FROM dashboard_signin_failures WHERE subject = $1`, accountSubject("ann@example.com")).Scan(&acct), "account failures")
	if acct != got[http.StatusUnauthorized] {
		t.Fatalf("account failures %d, want the %d checked", acct, got[http.StatusUnauthorized])
	}
}

// atOnce runs n requests as nearly at the same moment as it can: each is prepared (a browser, its
// form's token) by prepare(i), and the sends that prepare returns all start together. It returns
// how many answered each status.
func atOnce(n int, prepare func(i int) func() int) map[int]int {
	codes := make(chan int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			send := prepare(i)
			<-start
			codes <- send()
		})
	}
	close(start)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	return got
}

// Signing up with a taken email signs in with the right password and reveals nothing more than
// a failed sign-in with a wrong one.
func TestSignupOfTakenEmail(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signup("ann@example.com")
	b := f.browser(t)
	b.signupUnconfirmed("Ann@Example.com") // the right password: signed in (and no mail: nothing was made)
	if resp, body := b.get("/dashboard/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "ann@example.com") {
		t.Fatalf("sign-up with the right password did not sign in: %d", resp.StatusCode)
	}
	var users int
	_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_users`).Scan(&users)
	if users != 1 {
		t.Fatalf("%d users", users)
	}
	c := f.browser(t)
	resp, body := c.post("/dashboard/signup", url.Values{"csrf": {c.csrf("/dashboard/signup")}, "email": {"ann@example.com"},
		"password": {"another password!"}, "password_confirm": {"another password!"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "No account could be created") || sessionCookie(resp) != nil {
		t.Fatalf("sign-up of a taken email with another password: %d", resp.StatusCode)
	}
}

// A customer can never see or touch another account's keys, deliveries or usage: every route
// that takes an id is tried with the other account's ids.
func TestAccountIsolation(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	ann, bob := f.browser(t), f.browser(t)
	ann.signup("ann@example.com")
	bob.signup("bob@example.com")
	annAcct, bobAcct := f.accountOf(t, "ann@example.com"), f.accountOf(t, "bob@example.com")
	pgtest.Exec(t, f.pool, `UPDATE accounts SET tier = 'builder'`) // so that retries are allowed to both

	// Ann's key, delivery and usage.
	ann.post("/dashboard/keys", url.Values{"label": {"ann-prod"}, "csrf": {ann.csrf("/dashboard/keys")}})
	var annKey, annPrefix string
	if err := f.pool.QueryRow(ctx, `SELECT id, prefix FROM api_keys WHERE account_id = $1`, annAcct).Scan(&annKey, &annPrefix); err != nil {
		t.Fatal(err)
	}
	const job, delivery = "0b6f7d8e-1111-4c3e-9a55-000000000001", "0b6f7d8e-2222-4c3e-9a55-000000000001"
	pgtest.Exec(t, f.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'x@acme.example', 'https://ann-hooks.example/x', 'completed')`, job, annAcct)
	pgtest.Exec(t, f.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts, finished_at) VALUES ($1, $2, $3, 'https://ann-hooks.example/x', '{}', 'failed', 3, now())`, delivery, job, annAcct)
	usagetest.SetMonth(t, f.pool, annAcct, time.Now(), 42, 42)
	usagetest.SetDay(t, f.pool, annAcct, time.Now(), 42)

	csrf := bob.csrf("/dashboard/keys")
	if resp, _ := bob.post("/dashboard/keys/"+annKey+"/revoke", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("Bob revoking Ann's key: %d", resp.StatusCode)
	}
	if resp, _ := bob.post("/dashboard/deliveries/"+delivery+"/retry", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("Bob retrying Ann's delivery: %d", resp.StatusCode)
	}
	if resp, _ := bob.post("/dashboard/keys/provisioning/revoke", url.Values{"csrf": {csrf}, "account_id": {annAcct}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("Bob revoking his provisioning key: %d", resp.StatusCode)
	}
	if resp, body := bob.post("/dashboard/playground", url.Values{"csrf": {csrf}, "key_id": {annKey}, "email": {"a@b.example"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("Bob verifying with Ann's key: %d %s", resp.StatusCode, body)
	}
	if n := f.svc.calls.Load(); n != 0 {
		t.Errorf("the service was called %d times for another account's key", n)
	}
	for _, path := range []string{"/dashboard/", "/dashboard/keys", "/dashboard/deliveries", "/dashboard/deliveries?state=failed",
		"/dashboard/billing", "/dashboard/playground"} {
		resp, body := bob.get(path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Bob GET %s: %d", path, resp.StatusCode)
		}
		for _, secret := range []string{annKey, annPrefix, "ann-prod", delivery, "ann-hooks.example", annAcct, ">42<"} {
			if strings.Contains(body, secret) {
				t.Errorf("Bob's %s shows Ann's %q", path, secret)
			}
		}
	}
	// Lists: an upload with Ann's key never reaches the service, and whatever list id Bob asks
	// for, the service is asked as Bob's account, which has no such list.
	drain(f.svc.accounts)
	if resp, body := bob.upload(csrf, annKey, "list.csv", "email\na@b.example\n"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("Bob uploading with Ann's key: %d %s", resp.StatusCode, body)
	}
	if f.svc.uploads.Load() != 0 {
		t.Error("an upload with another account's key reached the service")
	}
	for _, path := range []string{"/dashboard/lists/" + delivery, "/dashboard/lists/" + delivery + "/download?format=csv"} {
		if resp, _ := bob.get(path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("Bob GET %s: %d", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"/dashboard/lists/" + delivery + "/cancel", "/dashboard/lists/" + delivery + "/delete"} {
		if resp, _ := bob.post(path, url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("Bob POST %s: %d", path, resp.StatusCode)
		}
	}
	for acct := range drain(f.svc.accounts) {
		if acct != bobAcct {
			t.Errorf("a request of Bob's went to the service as account %s", acct)
		}
	}

	// Ann's things are untouched and hers to see.
	var revoked bool
	_ = f.pool.QueryRow(ctx, `SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1`, annKey).Scan(&revoked)
	var replays int
	_ = f.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE replay_of IS NOT NULL`).Scan(&replays)
	if revoked || replays != 0 {
		t.Fatalf("Ann's key revoked %v, %d replays", revoked, replays)
	}
	if _, body := ann.get("/dashboard/deliveries"); !strings.Contains(body, delivery) {
		t.Fatal("Ann does not see her own delivery")
	}
	if _, body := ann.get("/dashboard/"); !strings.Contains(body, `id="calls-used">42<`) {
		t.Fatal("Ann does not see her own usage")
	}
	// Ann's playground runs as Ann's account and key.
	ann.post("/dashboard/playground", url.Values{"csrf": {ann.csrf("/dashboard/playground")}, "key_id": {annKey}, "email": {"not-an-address"}})
	if got := <-f.svc.accounts; got != annAcct || got == bobAcct {
		t.Fatalf("playground verified as %s, want %s", got, annAcct)
	}
}

// A free account sees why it cannot retry, and a retry request is refused by the shared rule.
func TestFreeTierCannotRetry(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	if _, body := b.get("/dashboard/deliveries"); !strings.Contains(body, `id="retry-why"`) {
		t.Fatal("free tier is not told why it cannot retry")
	}
	if resp, _ := b.post("/dashboard/deliveries/0b6f7d8e-2222-4c3e-9a55-000000000001/retry", url.Values{"csrf": {b.csrf("/dashboard/deliveries")}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("free retry: %d", resp.StatusCode)
	}
}

func TestPasswordHashing(t *testing.T) {
	enc := defaultHasher.hash("correct horse battery")
	if !strings.HasPrefix(enc, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q", enc)
	}
	if !verifyPassword("correct horse battery", enc) || verifyPassword("correct horse batterY", enc) ||
		verifyPassword("correct horse battery", "$argon2id$v=19$m=0,t=0,p=0$x$y") {
		t.Fatal("verifyPassword disagrees")
	}
	if checkPassword("short", "") == nil || checkPassword(strings.Repeat("x", 257), "") == nil || checkPassword("ten chars!", "") != nil {
		t.Fatal("checkPassword bounds")
	}
}

// drain empties ch and returns what it held, as a set.
func drain(ch chan string) map[string]bool {
	got := map[string]bool{}
	for {
		select {
		case v := <-ch:
			got[v] = true
		default:
			return got
		}
	}
}

// upload posts a list file as the upload form does: its fields, then the file.
func (b *browser) upload(csrf, keyID, name, content string) (*http.Response, string) {
	b.t.Helper()
	return b.uploadParts([][2]string{{"csrf", csrf}, {"key_id", keyID}, {"file", name}}, content)
}

// uploadParts posts a multipart form of the fields in order; the field named "file" is the file,
// with its name as the value and content as its bytes, generated as it is sent.
func (b *browser) uploadParts(fields [][2]string, content string) (*http.Response, string) {
	b.t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for _, f := range fields {
			if f[0] != "file" {
				_ = mw.WriteField(f[0], f[1])
				continue
			}
			fw, _ := mw.CreateFormFile("file", f[1])
			if _, err := io.WriteString(fw, content); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	resp, err := b.c.Post(b.base+"/dashboard/lists", mw.FormDataContentType(), pr)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// An upload without the CSRF token, or whose file comes before it, never reaches the service,
// nor does a form that is not multipart.
func TestListUploadRefused(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	csrf := b.csrf("/dashboard/lists")
	if resp, _ := b.upload("", "", "list.csv", "email\na@b.example\n"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("upload without CSRF: %d", resp.StatusCode)
	}
	if resp, _ := b.uploadParts([][2]string{{"file", "list.csv"}, {"csrf", csrf}}, "email\na@b.example\n"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("upload with the file before the CSRF token: %d", resp.StatusCode)
	}
	resp, err := b.c.PostForm(b.base+"/dashboard/lists", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("URL-encoded upload form: %d", resp.StatusCode)
	}
	// A field far too long: the form comes back naming it, with the other fields kept
	// (TestFormWithAFieldFarTooLong); nothing is uploaded.
	long := [][2]string{{"csrf", csrf}, {"column", "Email"}, {"name", strings.Repeat("n", maxFieldBytes+1)}, {"file", "list.csv"}}
	if resp, body := b.uploadParts(long, "email\na@b.example\n"); resp.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `The field &#34;Name&#34; was 1,025 bytes long`) {
		t.Errorf("upload with a field over %d bytes: %d\n%s", maxFieldBytes, resp.StatusCode, body)
	}
	if n := f.svc.uploads.Load(); n != 0 {
		t.Fatalf("%d uploads reached the service", n)
	}
}

// A file larger than any form (here 3 MB, over the API's 2 MB JSON body guard) streams through
// to the verification service intact, with the format and name chosen, and is stored as a list;
// one over the list limit is cut at the limit plus the form's slack, never read whole.
func TestListUploadStreams(t *testing.T) {
	f := newFixture(t, map[string]string{"MAILVET_LIST_MAX_BYTES": strconv.Itoa(4 << 20)})
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	pgtest.Exec(t, f.pool, `UPDATE accounts SET tier = 'builder' WHERE id = $1`, acct) // no monthly quota to refuse 3 MB of addresses
	b.post("/dashboard/keys", url.Values{"label": {"lists"}, "csrf": {b.csrf("/dashboard/keys")}})
	var key string
	if err := f.pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE account_id = $1`, acct).Scan(&key); err != nil {
		t.Fatal(err)
	}
	csrf := b.csrf("/dashboard/lists")

	var sb strings.Builder
	for i := 0; sb.Len() < 3<<20; i++ {
		fmt.Fprintf(&sb, "user%07d@example.com\n", i)
	}
	content := sb.String()
	fields := [][2]string{{"csrf", csrf}, {"format", "text"}, {"name", "june"}, {"key_id", key}, {"file", "june.dat"}}
	resp, body := b.uploadParts(fields, content)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/dashboard/lists/") {
		t.Fatalf("3 MB upload: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	up := f.svc.lastUpload()
	if up.err != nil || up.bytes != int64(len(content)) || up.sum != sha256.Sum256([]byte(content)) {
		t.Fatalf("the service read %d bytes (err %v), want the %d sent, unchanged", up.bytes, up.err, len(content))
	}
	if up.req.Format != list.Text || up.req.Name != "june" || up.req.Caller.Account != acct || up.req.Caller.Key != key {
		t.Fatalf("the service got the upload as %+v", up.req)
	}
	if _, body := b.get(resp.Header.Get("Location")); !strings.Contains(body, "june") {
		t.Fatalf("the uploaded list's page:\n%s", body)
	}

	big := content + content // 6 MB against a 4 MB limit
	resp, body = b.uploadParts(fields, big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than 4194304 bytes") {
		t.Fatalf("6 MB upload against a 4 MB limit: %d %s", resp.StatusCode, body)
	}
	if up := f.svc.lastUpload(); up.err == nil || up.bytes > 4<<20+uploadSlack {
		t.Fatalf("the service read %d bytes of the 6 MB (err %v); the bound is %d", up.bytes, up.err, 4<<20+uploadSlack)
	}

	// Without a name, the list is named after its file, as the CLI names one, minus what no name
	// may hold.
	unnamed := [][2]string{{"csrf", csrf}, {"key_id", key}, {"file", "C:\\leads\\May \u202eleads.csv"}}
	if resp, body := b.uploadParts(unnamed, "email\na@b.example\n"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upload without a name: %d %s", resp.StatusCode, body)
	}
	if up := f.svc.lastUpload(); up.req.Name != "May leads.csv" {
		t.Fatalf("upload without a name: the service got name %q", up.req.Name)
	}
}

// fakeCheckout stands in for Stripe Checkout (internal/billing, tested against stripe-mock): it
// counts the sessions opened. Its pages are on Stripe's own origin, or on origin if set (a Stripe
// account's custom domain).
type fakeCheckout struct {
	mu       sync.Mutex
	sessions int
	expires  []time.Time
	origin   string
	// paying: the customer's subscriptions at Stripe include one that pays (Subscribed).
	paying  bool
	lookups int
}

func (f *fakeCheckout) Subscribed(context.Context, string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	return f.paying, nil
}

func (f *fakeCheckout) PrepareCustomer(context.Context, billing.CheckoutRequest) (string, error) {
	return "cus_fake", nil
}

func (f *fakeCheckout) CheckoutURL(_ context.Context, r billing.CheckoutRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions++
	f.expires = append(f.expires, r.ExpiresAt)
	origin := cmp.Or(f.origin, "https://checkout.stripe.com")
	return fmt.Sprintf("%s/c/pay/cs_%d", origin, f.sessions), nil
}

func (f *fakeCheckout) Sells(t plan.Tier) bool { return t != plan.Free }

// Upgrades while a Checkout session of the account is open go to that session, which completes
// once: a double click or a second tab cannot start a second subscription. Another tier waits for
// it to expire; then a new session is opened.
func TestUpgradeReusesTheOpenCheckout(t *testing.T) {
	f := newFixture(t, nil)
	fc := &fakeCheckout{}
	f.h.checkout = fc
	now := time.Now()
	f.h.now = func() time.Time { return now }
	b := f.browser(t)
	b.signup("ann@example.com")
	csrf := b.csrf("/dashboard/billing")
	upgrade := func(tier string) (*http.Response, string) {
		return b.post("/dashboard/billing/checkout", url.Values{"csrf": {csrf}, "tier": {tier}})
	}

	var wg sync.WaitGroup
	locs := make([]string, 4)
	for i := range locs {
		wg.Go(func() {
			resp, _ := upgrade("builder")
			locs[i] = resp.Header.Get("Location")
		})
	}
	wg.Wait()
	if fc.sessions != 1 || locs[0] == "" || locs[0] != locs[1] || locs[0] != locs[2] || locs[0] != locs[3] {
		t.Fatalf("4 upgrades at once opened %d sessions, sent to %v; want one session for all", fc.sessions, locs)
	}
	if got := fc.expires[0]; !got.Equal(now.Add(account.CheckoutWindow)) {
		t.Errorf("session expires at %v, want %v", got, now.Add(account.CheckoutWindow))
	}
	if resp, body := upgrade("scale"); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "still open") {
		t.Fatalf("another tier while one is open: %d", resp.StatusCode)
	}
	now = now.Add(account.CheckoutWindow)
	if resp, _ := upgrade("scale"); resp.StatusCode != http.StatusSeeOther || fc.sessions != 2 {
		t.Fatalf("after the session expired: %d, %d sessions", resp.StatusCode, fc.sessions)
	}
}

// Coming back from Checkout (its success URL) changes no plan: the tier moves only with Stripe's
// subscription event (docs/dashboard.md, "How an upgrade works"), so a browser that reaches the
// success URL without paying gets nothing.
func TestReturnFromCheckoutChangesNoPlan(t *testing.T) {
	f := newFixture(t, nil)
	f.h.checkout = &fakeCheckout{}
	b := f.browser(t)
	b.signup("ann@example.com")
	resp, _ := b.post("/dashboard/billing/checkout", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "tier": {"scale"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	resp, body := b.get("/dashboard/billing?done=checkout")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Your plan changes as soon as Stripe confirms the payment") {
		t.Fatalf("success page: %d\n%.500s", resp.StatusCode, body)
	}
	var tier string
	if err := f.pool.QueryRow(context.Background(), `SELECT tier FROM accounts WHERE email = 'ann@example.com'`).Scan(&tier); err != nil {
		t.Fatal(err)
	}
	if tier != "free" {
		t.Fatalf("tier %s after the success URL alone, want free until Stripe's event", tier)
	}
}

// A customer who paid for a subscription whose webhook has not reached Mailvet (Stripe retrying
// it, a wrong STRIPE_WEBHOOK_SECRET) still looks free once the Checkout session's window is over;
// upgrading again must not open a second session that would charge them twice. A customer the
// upgrade has just created has nothing to find, and Stripe is not asked.
func TestUpgradeRefusedWhileAPaidSubscriptionAwaitsItsWebhook(t *testing.T) {
	f := newFixture(t, nil)
	fc := &fakeCheckout{paying: true}
	f.h.checkout = fc
	now := time.Now()
	f.h.now = func() time.Time { return now }
	b := f.browser(t)
	b.signup("ann@example.com")
	upgrade := func() (*http.Response, string) {
		return b.post("/dashboard/billing/checkout", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "tier": {"builder"}})
	}
	if resp, _ := upgrade(); resp.StatusCode != http.StatusSeeOther || fc.sessions != 1 || fc.lookups != 0 {
		t.Fatalf("first upgrade: %d, %d sessions, %d look-ups; want a session and no look-up for the new customer",
			resp.StatusCode, fc.sessions, fc.lookups)
	}
	// Paid at Stripe; the webhook does not arrive; the session's window ends.
	now = now.Add(account.CheckoutWindow)
	resp, body := upgrade()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "already have a subscription") || fc.sessions != 1 {
		t.Fatalf("upgrade with a paying subscription at Stripe: %d, %d sessions\n%.600s", resp.StatusCode, fc.sessions, body)
	}
	var open bool
	if err := f.pool.QueryRow(context.Background(), `SELECT checkout_url IS NOT NULL AND checkout_expires_at > $1 FROM accounts
		WHERE email = 'ann@example.com'`, now).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open {
		t.Fatal("a session was recorded as open")
	}
	// Without a paying subscription (the first one ended, say), the upgrade goes ahead.
	fc.paying = false
	if resp, _ := upgrade(); resp.StatusCode != http.StatusSeeOther || fc.sessions != 2 {
		t.Fatalf("upgrade without a paying subscription: %d, %d sessions", resp.StatusCode, fc.sessions)
	}
}

// A form with one field far too long (1 MB pasted into it) comes back with a message naming that
// field and the other fields as they were, instead of a "could not be read" page that loses them
// all (issue 32): the playground, the list upload and the sign-up form.
func TestFormWithAFieldFarTooLong(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	for _, label := range []string{"first", "second"} {
		b.post("/dashboard/keys", url.Values{"label": {label}, "csrf": {b.csrf("/dashboard/keys")}})
	}
	var second string
	if err := f.pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE label = 'second'`).Scan(&second); err != nil {
		t.Fatal(err)
	}
	mb := strings.Repeat("x", 1<<20)
	resp, body := b.post("/dashboard/playground", url.Values{"csrf": {b.csrf("/dashboard/playground")}, "key_id": {second}, "email": {mb}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `The field &#34;Email&#34; was 1,048,576 bytes long`) ||
		!strings.Contains(body, `value="`+second+`" selected`) {
		t.Errorf("playground: %d\n%s", resp.StatusCode, body)
	}
	if n := f.svc.calls.Load(); n != 0 {
		t.Errorf("%d verifications reached the service", n)
	}
	csrf := b.csrf("/dashboard/lists")
	resp, body = b.uploadParts([][2]string{{"csrf", csrf}, {"key_id", second}, {"format", "text"}, {"column", "mail"}, {"name", mb}, {"file", "l.txt"}}, "a@b.example\n")
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `The field &#34;Name&#34; was 1,048,576 bytes long`) ||
		!strings.Contains(body, `value="`+second+`" selected`) || !strings.Contains(body, `value="text" selected`) || !strings.Contains(body, `value="mail"`) ||
		!strings.Contains(body, "Choose the file again") {
		t.Errorf("upload: %d\n%s", resp.StatusCode, body)
	}
	if n := f.svc.uploads.Load(); n != 0 {
		t.Errorf("%d uploads reached the service", n)
	}
	anon := f.browser(t)
	resp, body = anon.post("/dashboard/signup", url.Values{"csrf": {anon.csrf("/dashboard/signup")}, "email": {"bob@example.com"},
		"password": {mb}, "password_confirm": {testPassword}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `The field &#34;Password&#34; was 1,048,576 bytes long`) ||
		!strings.Contains(body, `value="bob@example.com"`) {
		t.Errorf("sign-up: %d\n%s", resp.StatusCode, body)
	}
	// A body over the bound no form comes near is still refused whole, with a 413 page.
	resp, body = b.post("/dashboard/playground", url.Values{"csrf": {b.csrf("/dashboard/playground")}, "email": {strings.Repeat("x", maxFormBody)}})
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "The form could not be read") {
		t.Errorf("a body over %d bytes: %d\n%.300s", maxFormBody, resp.StatusCode, body)
	}
}
