package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
)

// keyCount is the number of active keys (standard and provisioning) of email's account.
func (f *fixture) keyCount(t *testing.T, email string) int {
	t.Helper()
	var n int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM api_keys k JOIN dashboard_users u ON u.account_id = k.account_id
		WHERE u.email_folded = lower($1) AND k.revoked_at IS NULL`, email).Scan(&n), "count keys")
	return n
}

func (f *fixture) unconfirmed(t *testing.T, email string) bool {
	t.Helper()
	var u bool
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT a.email_unconfirmed FROM accounts a JOIN dashboard_users u ON u.account_id = a.id
		WHERE u.email_folded = lower($1)`, email).Scan(&u), "read email_unconfirmed")
	return u
}

// openLink opens a mailed link's page and returns its CSRF and token fields.
func (b *browser) openLink(link string) (csrf, token string) {
	b.t.Helper()
	resp, body := b.get(link)
	m, c := tokenFieldRE.FindStringSubmatch(body), csrfRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || c == nil {
		b.t.Fatalf("%s: %d\n%s", link, resp.StatusCode, body)
	}
	return c[1], m[1]
}

// A sign-up gets a mail with one link; until it is opened the account sees the "confirm your
// email" state everywhere but the overview and settings, and creates no key (neither kind); the
// link asks for a click, confirms, works once, and then keys can be created.
func TestSignupIsConfirmedByMail(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signupUnconfirmed("ann@example.com")
	if !f.unconfirmed(t, "ann@example.com") {
		t.Fatal("a new sign-up is confirmed before its link was opened")
	}
	resp, body := b.get("/dashboard/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="confirm-state"`) || !strings.Contains(body, "ann@example.com") ||
		!strings.Contains(body, "24 hours") || !strings.Contains(body, `id="resend"`) {
		t.Fatalf("overview of an unconfirmed account: %d\n%s", resp.StatusCode, body)
	}
	for _, page := range []string{"/dashboard/keys", "/dashboard/playground", "/dashboard/lists", "/dashboard/billing", "/dashboard/deliveries"} {
		if resp, body := b.get(page); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Confirm your email first") {
			t.Errorf("%s unconfirmed: %d", page, resp.StatusCode)
		}
	}
	if resp, _ := b.get("/dashboard/settings"); resp.StatusCode != http.StatusOK {
		t.Errorf("settings unconfirmed: %d", resp.StatusCode)
	}
	csrf := csrfRE.FindStringSubmatch(body)[1]
	for _, path := range []string{"/dashboard/keys", "/dashboard/keys/provisioning"} {
		if resp, _ := b.post(path, url.Values{"csrf": {csrf}, "label": {"production"}}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s unconfirmed: %d", path, resp.StatusCode)
		}
	}
	if n := f.keyCount(t, "ann@example.com"); n != 0 {
		t.Fatalf("an unconfirmed account has %d keys", n)
	}

	m, link := b.mail("ann@example.com")
	if m.Subject != "Confirm your email for Mailvet" || !strings.HasPrefix(m.Links()[0], "http://localhost:8080/dashboard/confirm?token=") {
		t.Fatalf("confirmation mail: %q\n%s", m.Subject, m.Body)
	}
	var tokens int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dashboard_email_tokens WHERE token_hash = $1`,
		tokenHash(strings.TrimPrefix(link, "/dashboard/confirm?token="))).Scan(&tokens), "token")
	if tokens != 1 {
		t.Fatal("the table does not hold the link's token as its SHA-256")
	}
	// Opening the link confirms nothing yet: a mail scanner's GET must not.
	c, token := b.openLink(link)
	if !f.unconfirmed(t, "ann@example.com") {
		t.Fatal("opening the link confirmed without the click")
	}
	resp, _ = b.post("/dashboard/confirm", url.Values{"csrf": {c}, "token": {token}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/?done=confirmed" {
		t.Fatalf("confirm: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if f.unconfirmed(t, "ann@example.com") {
		t.Fatal("still unconfirmed")
	}
	var actor, detail string
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT actor, detail FROM audit_events
		WHERE kind = 'email_confirmed' AND account_id = (SELECT account_id FROM dashboard_users WHERE email = 'ann@example.com')`).
		Scan(&actor, &detail), "the confirmation's audit event")
	if actor != "ann@example.com" || detail != "confirmed with the mailed link" {
		t.Fatalf("audit event by %q: %q", actor, detail)
	}
	if resp, body := b.get(link); resp.StatusCode != http.StatusGone || !strings.Contains(body, "expired or was already used") {
		t.Fatalf("the used link again: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/confirm", url.Values{"csrf": {c}, "token": {token}}); resp.StatusCode != http.StatusGone {
		t.Fatalf("the used link posted again: %d", resp.StatusCode)
	}
	resp, body = b.get("/dashboard/?done=confirmed")
	if !strings.Contains(body, `id="tier"`) || !strings.Contains(body, "Your email is confirmed") {
		t.Fatalf("overview after the confirmation: %d\n%s", resp.StatusCode, body)
	}
	k := b.csrf("/dashboard/keys")
	if resp, _ := b.post("/dashboard/keys", url.Values{"csrf": {k}, "label": {"production"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("key after the confirmation: %d", resp.StatusCode)
	}
}

// A link opened in a browser that is not signed in (another device) confirms and leads to the
// sign-in page, which says so; the link signs no one in.
func TestConfirmLinkElsewhere(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signupUnconfirmed("bob@example.com")
	other := f.browser(t)
	_, link := other.mail("bob@example.com")
	c, token := other.openLink(link)
	resp, _ := other.post("/dashboard/confirm", url.Values{"csrf": {c}, "token": {token}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/signin?confirmed=1" || sessionCookie(resp) != nil {
		t.Fatalf("confirm elsewhere: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, body := other.get("/dashboard/signin?confirmed=1"); !strings.Contains(body, "Your email is confirmed") {
		t.Fatal("the sign-in page does not say the email is confirmed")
	}
	if f.unconfirmed(t, "bob@example.com") {
		t.Fatal("not confirmed")
	}
}

// The resend button mails a new link, at most maxConfirmResends times an hour; once one link is
// used, the others are dead.
func TestResendConfirmation(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signupUnconfirmed("cat@example.com")
	_, first := b.mail("cat@example.com")
	csrf := b.csrf("/dashboard/")
	var last string
	for i := range maxConfirmResends {
		resp, _ := b.post("/dashboard/confirm/resend", url.Values{"csrf": {csrf}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/?done=sent" {
			t.Fatalf("resend %d: %d", i+1, resp.StatusCode)
		}
		_, last = b.mail("cat@example.com")
	}
	resp, body := b.post("/dashboard/confirm/resend", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "Wait an hour") {
		t.Fatalf("resend past the limit: %d", resp.StatusCode)
	}
	c, token := b.openLink(last)
	if resp, _ := b.post("/dashboard/confirm", url.Values{"csrf": {c}, "token": {token}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm with the last link: %d", resp.StatusCode)
	}
	if resp, _ := b.get(first); resp.StatusCode != http.StatusGone {
		t.Fatalf("the first link after another was used: %d", resp.StatusCode)
	}
	// A confirmed account has nothing to resend.
	if resp, _ := b.post("/dashboard/confirm/resend", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/" {
		t.Fatalf("resend when confirmed: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// Someone signs up with another person's email and never confirms: within the link's lifetime the
// owner's sign-up is refused as for any taken email, but once it has passed the owner's sign-up
// replaces the stale account (and its link dies with it). A confirmed account is never replaced.
func TestStaleUnconfirmedAccountIsReplaced(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newFixture(t, nil, func(d *Deps) { d.Now = clock.Now })
	squatter := f.browser(t)
	squatter.signupUnconfirmed("dan@example.com")
	_, squatterLink := squatter.mail("dan@example.com")
	stale := f.accountOf(t, "dan@example.com")

	owner := f.browser(t)
	ownerSignup := func() (*http.Response, string) {
		return owner.post("/dashboard/signup", url.Values{"csrf": {owner.csrf("/dashboard/signup")}, "email": {"dan@example.com"},
			"password": {"the owner's own password"}, "password_confirm": {"the owner's own password"}})
	}
	clock.Add(23 * time.Hour)
	if resp, body := ownerSignup(); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, msgSignupRefused) {
		t.Fatalf("owner's sign-up within the lifetime: %d", resp.StatusCode)
	}
	clock.Add(time.Hour + time.Minute)
	if resp, body := ownerSignup(); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("owner's sign-up after the lifetime: %d\n%s", resp.StatusCode, body)
	}
	if now := f.accountOf(t, "dan@example.com"); now == stale {
		t.Fatal("the stale account was kept")
	}
	var left int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM accounts WHERE id = $1`, stale).Scan(&left), "stale")
	if left != 0 {
		t.Fatal("the stale account still exists")
	}
	if resp, _ := squatter.get(squatterLink); resp.StatusCode != http.StatusGone {
		t.Fatalf("the squatter's link after the replacement: %d", resp.StatusCode)
	}
	if resp, _ := squatter.get("/dashboard/"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the squatter's session after the replacement: %d", resp.StatusCode)
	}
	owner.confirmEmail("dan@example.com")
	if f.unconfirmed(t, "dan@example.com") {
		t.Fatal("the owner's account is not confirmed")
	}
	// Confirmed: however old, another sign-up of the email is refused.
	clock.Add(72 * time.Hour)
	other := f.browser(t)
	resp, _ := other.post("/dashboard/signup", url.Values{"csrf": {other.csrf("/dashboard/signup")}, "email": {"dan@example.com"},
		"password": {"somebody else's password"}, "password_confirm": {"somebody else's password"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || f.keyCount(t, "dan@example.com") != 0 {
		t.Fatalf("sign-up over a confirmed account: %d", resp.StatusCode)
	}
}

// Forgot password: the same answer for an email with an account and one without, a mail only for
// the first; the link's form checks the password rules; setting one ends every session of the
// user, signs this browser in, confirms the email, and the link works once and for ResetTTL.
func TestPasswordResetByMail(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newFixture(t, nil, func(d *Deps) { d.Now = clock.Now })
	first := f.browser(t)
	first.signup("eve@example.com")
	second := f.browser(t)
	resp, _ := second.post("/dashboard/signin", url.Values{"csrf": {second.csrf("/dashboard/signin")}, "email": {"eve@example.com"}, "password": {testPassword}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("second sign-in: %d", resp.StatusCode)
	}

	anon := f.browser(t)
	if _, body := anon.get("/dashboard/signin"); !strings.Contains(body, `href="/dashboard/forgot"`) {
		t.Fatal("the sign-in page has no forgot-password link")
	}
	forgot := func(email string) (int, string) {
		resp, body := anon.post("/dashboard/forgot", url.Values{"csrf": {anon.csrf("/dashboard/forgot")}, "email": {email}})
		return resp.StatusCode, strings.ReplaceAll(body, email, "EMAIL")
	}
	code1, known := forgot("eve@example.com")
	code2, unknown := forgot("nobody@example.com")
	if code1 != http.StatusOK || code2 != http.StatusOK || known != unknown || !strings.Contains(known, "If an account uses") {
		t.Fatalf("forgot answers differ: %d %d\n%s\n---\n%s", code1, code2, known, unknown)
	}
	m, link := anon.mail("eve@example.com")
	if m.Subject != "Reset your Mailvet password" || !strings.Contains(link, "/dashboard/reset?token=") {
		t.Fatalf("reset mail: %q %s", m.Subject, link)
	}
	f.h.WaitMail()
	for _, msg := range f.sink.Messages() {
		if strings.EqualFold(msg.To[0], "nobody@example.com") {
			t.Fatal("a mail went to an email without an account")
		}
	}

	c, token := anon.openLink(link)
	post := func(pw, again string) (*http.Response, string) {
		return anon.post("/dashboard/reset", url.Values{"csrf": {c}, "token": {token}, "new_password": {pw}, "new_password_confirm": {again}})
	}
	if resp, body := post("password12", "password12"); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "most common passwords") {
		t.Fatalf("a common password: %d", resp.StatusCode)
	}
	if resp, body := post("eve@example.com", "eve@example.com"); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "your email address") {
		t.Fatalf("the email as password: %d", resp.StatusCode)
	}
	if resp, _ := post("a brand new password", "another new password"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("differing passwords: %d", resp.StatusCode)
	}
	resp, _ = post("a brand new password", "a brand new password")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/?done=reset" || sessionCookie(resp) == nil {
		t.Fatalf("reset: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := anon.get("/dashboard/?done=reset"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "every other session was signed out") {
		t.Fatalf("the new session: %d", resp.StatusCode)
	}
	for i, old := range []*browser{first, second} {
		if resp, _ := old.get("/dashboard/"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/dashboard/signin") {
			t.Fatalf("old session %d after the reset: %d", i+1, resp.StatusCode)
		}
	}
	if n := f.auditCount(t, "eve@example.com", "password_change", "reset with a mailed link; every session ended"); n != 1 {
		t.Errorf("%d password_change events for the reset, want 1", n)
	}
	if resp, _ := post("a third password here", "a third password here"); resp.StatusCode != http.StatusGone {
		t.Fatalf("the used link again: %d", resp.StatusCode)
	}
	signin := func(pw string) int {
		b := f.browser(t)
		resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"eve@example.com"}, "password": {pw}})
		return resp.StatusCode
	}
	if signin(testPassword) != http.StatusUnauthorized || signin("a brand new password") != http.StatusSeeOther {
		t.Fatal("the old password still works, or the new one does not")
	}

	// A link works for ResetTTL (1 hour) only.
	anon = f.browser(t) // signed out again
	forgot("eve@example.com")
	_, link = anon.mail("eve@example.com")
	clock.Add(time.Hour + time.Second)
	if resp, _ := anon.get(link); resp.StatusCode != http.StatusGone {
		t.Fatalf("an expired link: %d", resp.StatusCode)
	}
}

// A reset link also confirms the email (it came through it), and asking for reset links is
// bounded per email without the answer saying so.
func TestResetConfirmsAndIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signupUnconfirmed("fay@example.com")
	anon := f.browser(t)
	_, _ = anon.mail("fay@example.com") // the confirmation
	for range maxResetsPerEmail + 2 {
		resp, body := anon.post("/dashboard/forgot", url.Values{"csrf": {anon.csrf("/dashboard/forgot")}, "email": {"fay@example.com"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "If an account uses") {
			t.Fatalf("forgot: %d", resp.StatusCode)
		}
	}
	f.h.WaitMail()
	var resets int
	for _, m := range f.sink.Messages() {
		if m.Subject == "Reset your Mailvet password" {
			resets++
		}
	}
	if resets != maxResetsPerEmail {
		t.Fatalf("%d reset mails, want %d", resets, maxResetsPerEmail)
	}
	_, link := anon.mail("fay@example.com")
	c, token := anon.openLink(link)
	resp, _ := anon.post("/dashboard/reset", url.Values{"csrf": {c}, "token": {token}, "new_password": {"fay's new password"}, "new_password_confirm": {"fay's new password"}})
	if resp.StatusCode != http.StatusSeeOther || f.unconfirmed(t, "fay@example.com") {
		t.Fatalf("reset of an unconfirmed account: %d, unconfirmed %v", resp.StatusCode, f.unconfirmed(t, "fay@example.com"))
	}
	if n := f.auditCount(t, "fay@example.com", "email_confirmed", "confirmed with a password-reset link"); n != 1 {
		t.Errorf("%d email_confirmed events for the reset of an unconfirmed account, want 1", n)
	}
}

// auditCount is the number of audit events of kind with detail by the dashboard user email.
func (f *fixture) auditCount(t *testing.T, email, kind, detail string) int {
	t.Helper()
	var n int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events
		WHERE actor = $1 AND kind = $2 AND detail = $3 AND outcome = 'success'`, email, kind, detail).Scan(&n), "audit events")
	return n
}

// MAILVET_DASHBOARD_SIGNUP=off closes sign-up; =unconfirmed makes accounts usable at once with no
// mail; without a relay there is no password reset by email.
func TestSignupModes(t *testing.T) {
	off := newFixture(t, map[string]string{"MAILVET_DASHBOARD_SIGNUP": "off"})
	b := off.browser(t)
	if resp, _ := b.get("/dashboard/signup"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("sign-up page when off: %d", resp.StatusCode)
	}
	if _, body := b.get("/dashboard/signin"); strings.Contains(body, `href="/dashboard/signup"`) {
		t.Fatal("the sign-in page links to a closed sign-up")
	}
	token := b.csrf("/dashboard/signin")
	resp, _ := b.post("/dashboard/signup", url.Values{"csrf": {token}, "email": {"gus@example.com"}, "password": {testPassword}, "password_confirm": {testPassword}})
	var users int
	pgtest.Must(t, off.pool.QueryRow(t.Context(), `SELECT count(*) FROM dashboard_users`).Scan(&users), "users")
	if resp.StatusCode != http.StatusNotFound || users != 0 {
		t.Fatalf("sign-up when off: %d, %d users", resp.StatusCode, users)
	}

	open := newFixture(t, map[string]string{"MAILVET_DASHBOARD_SIGNUP": "unconfirmed"}, func(d *Deps) { d.Mailer = nil })
	o := open.browser(t)
	if _, body := o.get("/dashboard/signin"); strings.Contains(body, `href="/dashboard/forgot"`) {
		t.Fatal("the sign-in page offers a reset with no relay")
	}
	o.signupUnconfirmed("hal@example.com")
	if open.unconfirmed(t, "hal@example.com") {
		t.Fatal("an unconfirmed-mode sign-up must be usable at once")
	}
	if resp, _ := o.post("/dashboard/keys", url.Values{"csrf": {o.csrf("/dashboard/keys")}, "label": {"x"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("key in unconfirmed mode: %d", resp.StatusCode)
	}
	anon := open.browser(t)
	if resp, _ := anon.post("/dashboard/forgot", url.Values{"csrf": {anon.csrf("/dashboard/signin")}, "email": {"hal@example.com"}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("forgot without a relay: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := open.sink.Next(ctx, "hal@example.com"); err == nil {
		t.Fatal("a mail was sent in unconfirmed mode")
	}
}

// A confirmation link used while the account is being deleted waits for the deletion and then
// finds its link gone (410), rather than deadlocking with it: both lock the account's row first.
// The deletion is played here by its first statements (internal/privacy, DeleteAccount).
func TestConfirmWhileTheAccountIsDeleted(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signupUnconfirmed("gil@example.com")
	_, link := b.mail("gil@example.com")
	c, token := b.openLink(link)
	acct := f.accountOf(t, "gil@example.com")

	ctx := t.Context()
	del, err := f.pool.Begin(ctx)
	pgtest.Must(t, err, "begin")
	defer del.Rollback(ctx)
	_, err = del.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, acct)
	pgtest.Must(t, err, "the deletion locks the account")

	confirmed := make(chan int, 1)
	go func() {
		resp, _ := b.post("/dashboard/confirm", url.Values{"csrf": {c}, "token": {token}})
		confirmed <- resp.StatusCode
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		pgtest.Must(t, f.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting), "waiting")
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the confirmation never waited for the deletion")
		}
	}
	// The deletion goes on to the users and, by cascade, their tokens: with the confirmation
	// holding the token, each would wait for the other.
	_, err = del.Exec(ctx, `DELETE FROM dashboard_users WHERE account_id = $1`, acct)
	pgtest.Must(t, err, "the deletion deletes the users")
	pgtest.Must(t, del.Commit(ctx), "the deletion commits")
	select {
	case code := <-confirmed:
		if code != http.StatusGone {
			t.Errorf("confirmation after the deletion: %d, want 410", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the confirmation did not finish")
	}
}

// The stale account a sign-up replaces is deleted with everything that has a foreign key to it;
// its audit events have none (docs/security.md): its sign-up, with the email and the client
// address it came from, stays for operators, under an account id that no longer exists, until the
// audit retention ends (docs/personal-data.md, audit_events).
func TestAReplacedAccountsEventsStayForOperators(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newFixture(t, nil, func(d *Deps) { d.Now = clock.Now })
	squatter := f.browser(t)
	squatter.signupUnconfirmed("eve@example.com")
	stale := f.accountOf(t, "eve@example.com")
	clock.Add(25 * time.Hour)
	owner := f.browser(t)
	resp, body := owner.post("/dashboard/signup", url.Values{"csrf": {owner.csrf("/dashboard/signup")}, "email": {"eve@example.com"},
		"password": {"the owner's own password"}, "password_confirm": {"the owner's own password"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("owner's sign-up after the lifetime: %d\n%s", resp.StatusCode, body)
	}
	var accounts, events int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM accounts WHERE id = $1),
		(SELECT count(*) FROM audit_events WHERE account_id = $1 AND actor = 'eve@example.com' AND kind = 'signup' AND client_addr IS NOT NULL)`,
		stale).Scan(&accounts, &events), "replaced account")
	if accounts != 0 || events != 1 {
		t.Fatalf("after the replacement: %d accounts and %d sign-up events of the replaced account; want 0 and 1", accounts, events)
	}
}
