package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// events is the account's audit log, oldest first, as audit.List reads it.
func (f *fixture) events(t *testing.T, accountID string) []audit.Event {
	t.Helper()
	p, err := audit.List(context.Background(), f.pool, accountID, audit.Filter{Limit: audit.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]audit.Event, len(p.Events))
	for i, e := range p.Events {
		out[len(out)-1-i] = e
	}
	return out
}

type wantEvent struct {
	kind    audit.Kind
	outcome audit.Outcome
	detail  string // a part of the detail
}

func checkEvents(t *testing.T, got []audit.Event, actor string, want []wantEvent) {
	t.Helper()
	if len(got) != len(want) {
		for _, e := range got {
			t.Logf("  %s %s %q", e.Kind, e.Outcome, e.Detail)
		}
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.kind || e.Outcome != w.outcome || !strings.Contains(e.Detail, w.detail) ||
			e.ActorType != audit.ActorUser || e.Actor != actor || e.Client.String() != "127.0.0.1" {
			t.Errorf("event %d: %s %s by %s %s from %s %q, want %s %s %q by %s from 127.0.0.1",
				i, e.Kind, e.Outcome, e.ActorType, e.Actor, e.Client, e.Detail, w.kind, w.outcome, w.detail, actor)
		}
	}
}

// Every security event the dashboard's forms cause is in the account's audit log, written by the
// real routes, with the user as the actor and the client's address; the Security page, linked in
// the navigation, shows them newest first.
func TestDashboardActionsAreAudited(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")

	csrf, token := b.token(keyTokenRE)
	if resp, _ := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"production"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create key: %d", resp.StatusCode)
	}
	var keyID, prefix string
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT id, prefix FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct).
		Scan(&keyID, &prefix), "read key")
	if resp, _ := b.post("/dashboard/keys/"+keyID+"/revoke", url.Values{"csrf": {b.csrf("/dashboard/keys")}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke key: %d", resp.StatusCode)
	}
	csrf, token = b.token(provTokenRE)
	if resp, _ := b.post("/dashboard/keys/provisioning", url.Values{"csrf": {csrf}, "form_token": {token}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create provisioning key: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/keys/provisioning/revoke", url.Values{"csrf": {b.csrf("/dashboard/keys")}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke provisioning key: %d", resp.StatusCode)
	}
	// Nothing left to revoke: nothing changed, nothing is recorded.
	if resp, _ := b.post("/dashboard/keys/provisioning/revoke", url.Values{"csrf": {b.csrf("/dashboard/keys")}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke no provisioning key: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/billing/spend-cap", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "cap_eur": {"5,000"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("set spend cap: %d", resp.StatusCode)
	}
	const next = "a brand new passphrase"
	settings := func(current string) int {
		resp, _ := b.post("/dashboard/settings/password", url.Values{"csrf": {b.csrf("/dashboard/settings")},
			"current_password": {current}, "new_password": {next}, "new_password_confirm": {next}})
		return resp.StatusCode
	}
	if code := settings("not the password at all"); code != http.StatusUnprocessableEntity {
		t.Fatalf("wrong current password: %d", code)
	}
	if code := settings(testPassword); code != http.StatusSeeOther {
		t.Fatalf("password change: %d", code)
	}
	if resp, _ := b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/settings")}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	signin := func(password string) int {
		resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"Ann@Example.com"}, "password": {password}})
		return resp.StatusCode
	}
	if code := signin(testPassword); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with the old password: %d", code)
	}
	if code := signin(next); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}

	checkEvents(t, f.events(t, acct), "ann@example.com", []wantEvent{
		{audit.SignUp, audit.Success, "free account created"},
		{audit.SignIn, audit.Success, "after sign-up"},
		{audit.EmailConfirmed, audit.Success, "confirmed with the mailed link"},
		{audit.KeyCreated, audit.Success, "standard key " + prefix + " (production)"},
		{audit.KeyRevoked, audit.Success, "standard key " + prefix + " (production)"},
		{audit.KeyCreated, audit.Success, "provisioning key sk_mgmt_"},
		{audit.KeyRevoked, audit.Success, "provisioning key sk_mgmt_"},
		{audit.SpendCapChanged, audit.Success, "spend cap set to €5,000.00"},
		{audit.PasswordChange, audit.Failure, "wrong current password"},
		{audit.PasswordChange, audit.Success, "every other session ended"},
		{audit.SignOut, audit.Success, ""},
		{audit.SignIn, audit.Failure, "wrong password"},
		{audit.SignIn, audit.Success, ""},
	})

	_, home := b.get("/dashboard/")
	if !strings.Contains(home, `<a href="/dashboard/security">Security</a>`) {
		t.Error("the navigation has no link to the Security page")
	}
	resp, page := b.get("/dashboard/security")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("security page: %d", resp.StatusCode)
	}
	rows := regexp.MustCompile(`<tr data-kind="([a-z_]+)" data-outcome="([a-z]+)">`).FindAllStringSubmatch(page, -1)
	if len(rows) != 13 || rows[0][1] != "signin" || rows[0][2] != "success" || rows[1][1] != "signin" || rows[1][2] != "failure" || rows[12][1] != "signup" {
		t.Errorf("the page's rows, newest first: %v", rows)
	}
	for _, want := range []string{"Key created", "Spend cap changed", `<span class="badge failed">failed</span>`, "<code>127.0.0.1</code>",
		"<code>ann@example.com</code>", "spend cap set to €5,000.00", prefix, `aria-current="page">Security`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Security page lacks %q", want)
		}
	}
}

// A failed sign-in for an email without an account is kept for operators, with no account and
// without the email; the throttle starting to delay is written once, not for every refused
// attempt, and attempts the throttle refuses write nothing.
func TestSigninFailuresAndTheThrottleAreAudited(t *testing.T) {
	f := newFixture(t, nil)
	f.browser(t).signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	b := f.browser(t)
	signin := func(email string) int {
		resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {email}, "password": {"wrong password here"}})
		return resp.StatusCode
	}
	if code := signin("nobody@example.com"); code != http.StatusUnauthorized {
		t.Fatalf("unknown email: %d", code)
	}
	var orphans int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events
		WHERE account_id IS NULL AND kind = 'signin' AND outcome = 'failure' AND actor = '' AND detail = 'no account has this email'
		  AND host(client_addr) = '127.0.0.1'`).Scan(&orphans), "count")
	if orphans != 1 {
		t.Errorf("%d account-less failures recorded, want 1", orphans)
	}
	var leaked int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE actor LIKE '%nobody%' OR detail LIKE '%nobody%'`).Scan(&leaked), "count")
	if leaked != 0 {
		t.Error("the unknown email typed was stored")
	}
	for i := range maxAccountFailures {
		if code := signin("ann@example.com"); code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i+1, code)
		}
	}
	for range 3 {
		if code := signin("ann@example.com"); code != http.StatusTooManyRequests {
			t.Fatalf("a throttled attempt: %d", code)
		}
	}
	want := make([]wantEvent, 0, 8)
	want = append(want, wantEvent{audit.SignUp, audit.Success, ""}, wantEvent{audit.SignIn, audit.Success, ""},
		wantEvent{audit.EmailConfirmed, audit.Success, "confirmed with the mailed link"})
	for range maxAccountFailures {
		want = append(want, wantEvent{audit.SignIn, audit.Failure, "wrong password"})
	}
	want = append(want, wantEvent{audit.SignInThrottled, audit.Failure, "5 failed sign-ins from one address on this account: each further attempt waits 30 seconds, doubling up to 15 minutes"})
	checkEvents(t, f.events(t, acct), "ann@example.com", want)
}

// A sign-in never starts a session without its event: when the event cannot be written the
// sign-in fails and no session exists. A refused password and a sign-out still answer as always,
// their events logged and counted instead (docs/security.md, "When an audit write fails").
func TestSigninNeedsItsEventSignoutDoesNot(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	pgtest.Exec(t, f.pool, `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	before := audit.WriteFailures()
	if resp, _ := b.post("/dashboard/signout", url.Values{"csrf": {b.csrf("/dashboard/")}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out without the audit log: %d", resp.StatusCode)
	}
	var sessions int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&sessions), "count")
	if sessions != 0 {
		t.Fatalf("%d sessions after the sign-out", sessions)
	}
	resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {"wrong password here"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password without the audit log: %d", resp.StatusCode)
	}
	if got := audit.WriteFailures() - before; got != 2 {
		t.Errorf("%d write failures counted, want 2 (the sign-out, the refused password)", got)
	}
	resp, _ = b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"ann@example.com"}, "password": {testPassword}})
	if resp.StatusCode != http.StatusInternalServerError || sessionCookie(resp) != nil && sessionCookie(resp).Value != "" {
		t.Fatalf("sign-in whose event fails: %d, cookie %v", resp.StatusCode, sessionCookie(resp))
	}
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_sessions`).Scan(&sessions), "count")
	if sessions != 0 {
		t.Errorf("%d sessions started without their event", sessions)
	}
}

// The Security page shows only the signed-in account's events, fifty a page with a link to older
// ones; a page link that was not issued shows the newest events with a 400.
func TestSecurityPageIsPerAccountAndPaged(t *testing.T) {
	f := newFixture(t, nil)
	ann, bob := f.browser(t), f.browser(t)
	ann.signup("ann@example.com")
	bob.signup("bob@example.com")
	acct := f.accountOf(t, "ann@example.com")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 60 {
		pgtest.Must(t, audit.Record(context.Background(), f.pool, audit.Event{AccountID: acct, At: start.Add(time.Duration(i) * time.Minute),
			ActorType: audit.ActorKey, Actor: "sk_mgmt_abcd…wxyz", Kind: audit.KeyCreated, Outcome: audit.Success, Detail: "old key"}), "record")
	}
	row := regexp.MustCompile(`<tr data-kind=`)
	_, page := ann.get("/dashboard/security")
	if n := len(row.FindAllString(page, -1)); n != securityPageSize {
		t.Fatalf("first page: %d rows, want %d", n, securityPageSize)
	}
	older := regexp.MustCompile(`href="/dashboard/security(\?cursor=[^"]+)" id="older"`).FindStringSubmatch(page)
	if older == nil {
		t.Fatal("no link to older events")
	}
	_, page = ann.get("/dashboard/security" + strings.ReplaceAll(older[1], "&amp;", "&"))
	// 60 recorded here and the sign-up's three: signup, signin, email_confirmed.
	if n := len(row.FindAllString(page, -1)); n != 63-securityPageSize || strings.Contains(page, `id="older"`) {
		t.Errorf("second page: %d rows, want %d and no further link", n, 63-securityPageSize)
	}
	_, page = bob.get("/dashboard/security")
	if strings.Contains(page, "ann@example.com") || strings.Contains(page, "old key") || len(row.FindAllString(page, -1)) != 3 {
		t.Errorf("bob's page shows another account's events:\n%s", page)
	}
	resp, page := ann.get("/dashboard/security?cursor=not-issued")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "That page does not exist") || len(row.FindAllString(page, -1)) != securityPageSize {
		t.Errorf("a bad cursor: %d", resp.StatusCode)
	}
}

// At a phone's width (375 px) the Security page's events stack instead of scrolling sideways.
func TestSecurityPageAtPhoneWidth(t *testing.T) {
	bin := chromiumtest.Path(t)
	f := newFixture(t, nil)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	run := chromiumtest.Steps(t, ctx)
	run("phone width", chromedp.EmulateViewport(375, 800))
	signUpAndConfirm(t, run, f.sink, srv.URL, "a.rather.long.address.for.a.phone@example.com")
	acct := f.accountOf(t, "a.rather.long.address.for.a.phone@example.com")
	pgtest.Must(t, audit.Record(context.Background(), f.pool, audit.Event{AccountID: acct, ActorType: audit.ActorKey,
		Actor: "sk_mgmt_abcd…wxyz", Kind: audit.KeyCreated, Outcome: audit.Success,
		Detail: "standard key sk_live_abcd…wxyz (a label that is long enough to wrap on a narrow screen)"}), "record")
	run("security page", chromedp.Navigate(srv.URL+"/dashboard/security"), chromedp.WaitVisible(chromedp.CSS("#events")))
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`
		document.querySelectorAll("#events tbody tr").length === 4 && // signup, email_confirmed, signin, the key
		[...document.querySelectorAll(".scroll")].every(s => s.scrollWidth <= s.clientWidth) &&
		document.documentElement.scrollWidth <= innerWidth &&
		[...document.querySelectorAll("#events td")].every(td => td.getBoundingClientRect().right <= innerWidth)`))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		why, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({rows: document.querySelectorAll("#events tbody tr").length,
			scroll: [...document.querySelectorAll(".scroll")].map(s => [s.scrollWidth, s.clientWidth]),
			page: [document.documentElement.scrollWidth, innerWidth],
			cells: [...document.querySelectorAll("#events td")].map(td => Math.round(td.getBoundingClientRect().right)),
			wide: [...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > innerWidth).map(e => e.tagName + "." + e.className + "#" + e.id + ":" + Math.round(e.getBoundingClientRect().right)).slice(0, 10)})`))
		t.Errorf("the Security page scrolls sideways or cuts a cell at 375 px: %s", why)
	}
}
