package dashboard

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"

	"github.com/mailvet/mailvet/internal/passwords"
)

// The passwords of issue 31's finding 4, and others NIST SP 800-63B says to refuse, are refused
// with a sentence that says why; a long passphrase is not (docs/dashboard.md, "Passwords").
func TestCheckPassword(t *testing.T) {
	const email = "ann.lee.example@example.com"
	for _, c := range []struct{ password, says string }{
		{"aaaaaaaaaa", "at least 4 different"},
		{"abababababab", "at least 4 different"},
		{"password12", "most common passwords"},
		{"PassWord123", "most common passwords"}, // the list is matched whatever the case
		{"qwertyuiop", "most common passwords"},
		{"1234567890", "most common passwords"},
		{strings.Repeat(" ", 10), "only spaces"},
		{"\t \u00a0  \u3000    ", "only spaces"},
		{email, "your email address"},
		{"Ann.Lee.Example@Example.com", "your email address"},
		{"ann.lee.example", "the part of it before the @"},
		{"short", "at least 10 characters"},
		{strings.Repeat("xy1z", 65), "at most 256 bytes"},
		{"\xffinvalid text", "valid text"},
	} {
		err := checkPassword(c.password, email)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v, want a refusal saying %q", c.password, err, c.says)
		}
	}
	for _, ok := range []string{"correct horse battery", "ten chars!", "ann.lee.example 2026 blue", "a long enough password"} {
		if err := checkPassword(ok, email); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	if n := passwords.Len(); n < 10_000 {
		t.Errorf("the common-password list has %d entries", n)
	}
}

// The sign-up and password-change forms refuse weak passwords with the reason on the page, and
// store nothing: no account, no new hash.
func TestWeakPasswordsRefusedByTheForms(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	for _, c := range []struct{ password, says string }{
		{"password12", "most common passwords"},
		{"aaaaaaaaaa", "at least 4 different"},
		{strings.Repeat(" ", 10), "only spaces"},
		{"weak.owner@example.com", "your email address"},
	} {
		resp, body := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {"weak.owner@example.com"},
			"password": {c.password}, "password_confirm": {c.password}})
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(html.UnescapeString(body), c.says) {
			t.Errorf("sign-up with %q: %d, want 422 saying %q", c.password, resp.StatusCode, c.says)
		}
	}
	var users int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_users`).Scan(&users); err != nil || users != 0 {
		t.Fatalf("%d users after refused sign-ups (%v)", users, err)
	}

	b.signup("ann@example.com")
	hash := func() string {
		var h string
		if err := f.pool.QueryRow(context.Background(), `SELECT password_hash FROM dashboard_users WHERE email = 'ann@example.com'`).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hash()
	for _, c := range []struct{ password, says string }{
		{"Password123", "most common passwords"},
		{"ann@example.com", "your email address"},
		{strings.Repeat(" ", 12), "only spaces"},
	} {
		resp, body := b.post("/dashboard/settings/password", url.Values{"csrf": {b.csrf("/dashboard/settings")},
			"current_password": {testPassword}, "new_password": {c.password}, "new_password_confirm": {c.password}})
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(html.UnescapeString(body), c.says) {
			t.Errorf("new password %q: %d, want 422 saying %q", c.password, resp.StatusCode, c.says)
		}
	}
	if hash() != before {
		t.Fatal("a refused new password was stored")
	}
}

// Changing the password gives the browser a new session token: the token it had (perhaps stolen,
// the reason to change the password) stops working, as do the user's other sessions, and the new
// one works.
func TestPasswordChangeRotatesTheSession(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	other := f.browser(t)
	resp, _ := other.post("/dashboard/signin", url.Values{"csrf": {other.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {testPassword}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("second sign-in: %d", resp.StatusCode)
	}
	u, _ := url.Parse(f.srv.URL + "/dashboard/")
	cookieOf := func(b *browser) string {
		for _, c := range b.c.Jar.Cookies(u) {
			if c.Name == SessionCookie {
				return c.Value
			}
		}
		return ""
	}
	old := cookieOf(b)
	const next = "a brand new passphrase"
	resp, body := b.post("/dashboard/settings/password", url.Values{"csrf": {b.csrf("/dashboard/settings")},
		"current_password": {testPassword}, "new_password": {next}, "new_password_confirm": {next}})
	if resp.StatusCode != http.StatusSeeOther || sessionCookie(resp) == nil {
		t.Fatalf("password change: %d, session cookie %v\n%s", resp.StatusCode, sessionCookie(resp), body)
	}
	if fresh := cookieOf(b); fresh == "" || fresh == old {
		t.Fatalf("the session token did not change: %q", fresh)
	}
	if resp, _ := b.get("/dashboard/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the new token: %d", resp.StatusCode)
	}
	stale := f.browser(t)
	stale.c.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: old, Path: Prefix}})
	for name, c := range map[string]*browser{"the old token": stale, "another session": other} {
		if resp, _ := c.get("/dashboard/"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "/signin") {
			t.Errorf("%s after the change: %d %s", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	var sessions int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&sessions); err != nil || sessions != 1 {
		t.Fatalf("%d sessions after the change (%v), want the new one", sessions, err)
	}
}

// A password change also voids the reset links mailed before it: whoever holds one (the reason
// to change a password may be someone else in the mailbox) could otherwise set a password of
// their own within the link's hour and end the owner's new session (docs/dashboard.md,
// "Security model").
func TestPasswordChangeVoidsEarlierResetLinks(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	thief := f.browser(t)
	if resp, _ := thief.post("/dashboard/forgot", url.Values{"csrf": {thief.csrf("/dashboard/forgot")}, "email": {"ann@example.com"}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("forgot: %d", resp.StatusCode)
	}
	_, link := thief.mail("ann@example.com")

	const next = "a brand new passphrase"
	if resp, body := b.post("/dashboard/settings/password", url.Values{"csrf": {b.csrf("/dashboard/settings")},
		"current_password": {testPassword}, "new_password": {next}, "new_password_confirm": {next}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("password change: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := thief.get(link); resp.StatusCode != http.StatusGone {
		t.Errorf("the reset link mailed before the change opens: %d, want 410", resp.StatusCode)
	}
	// Posting the link's form straight away is refused as well, and changes nothing.
	token := strings.TrimPrefix(link[strings.Index(link, "token="):], "token=")
	token, _ = url.QueryUnescape(token)
	resp, _ := thief.post("/dashboard/reset", url.Values{"csrf": {thief.csrf("/dashboard/forgot")}, "token": {token},
		"new_password": {"the thief's password"}, "new_password_confirm": {"the thief's password"}})
	if resp.StatusCode != http.StatusGone {
		t.Errorf("a reset with the earlier link: %d, want 410", resp.StatusCode)
	}
	if resp, _ := b.get("/dashboard/"); resp.StatusCode != http.StatusOK {
		t.Errorf("the owner's session after the attempt: %d, want 200", resp.StatusCode)
	}
}

// A password signs in whatever Unicode form it arrives in (docs/dashboard.md, "Passwords"): "é"
// precomposed or as "e" and a combining accent, full-width letters from an East Asian input
// method; a hash stored from the form as typed, before normalisation, still verifies as typed.
func TestPasswordUnicodeForms(t *testing.T) {
	const nfc, nfd = "Crème brûlée à l\u2019orange", "Cre\u0300me bru\u0302le\u0301e a\u0300 l\u2019orange"
	const fullWidth, ascii = "ｐａｓｓ ｐｈｒａｓｅ ４２", "pass phrase 42"
	h := hasher{time: 1, memoryKiB: 64, threads: 1}
	for set, typed := range map[string]string{nfc: nfd, nfd: nfc, fullWidth: ascii, ascii: fullWidth} {
		if !verifyPassword(typed, h.hash(set)) {
			t.Errorf("password set as %q refused when typed as %q", set, typed)
		}
	}
	legacy := argon2.IDKey([]byte(nfd), []byte("0123456789abcdef"), 1, 64, 1, 32)
	enc := fmt.Sprintf("$argon2id$v=%d$m=64,t=1,p=1$%s$%s", argon2.Version,
		base64.RawStdEncoding.EncodeToString([]byte("0123456789abcdef")), base64.RawStdEncoding.EncodeToString(legacy))
	if !verifyPassword(nfd, enc) {
		t.Error("a hash of the password as typed no longer verifies")
	}
	if verifyPassword("Creme brulee a l'orange", h.hash(nfc)) {
		t.Error("a password without its accents matches")
	}
	// "é" as two code points counts as one character: nine letters and a digit are too short.
	if err := checkPassword("e\u0301e\u0301e\u0301abcde1", "ann@example.com"); err == nil {
		t.Error("a 9-character password in decomposed form was accepted")
	}

	f := newFixture(t, nil)
	b := f.browser(t)
	resp, body := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {"ann@example.com"},
		"password": {nfc}, "password_confirm": {nfc}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-up: %d\n%s", resp.StatusCode, body)
	}
	other := f.browser(t)
	resp, body = other.post("/dashboard/signin", url.Values{"csrf": {other.csrf("/dashboard/signin")}, "email": {"ann@example.com"},
		"password": {nfd}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in with the decomposed form of the password: %d\n%s", resp.StatusCode, body)
	}
}
