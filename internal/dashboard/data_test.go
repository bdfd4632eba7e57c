package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mailvet/mailvet/internal/privacy/privacytest"
	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// The data page: the export downloads the account's data; the deletion needs the CSRF token,
// the typed email and the password, refuses a paying account, and leaves nothing of the account
// but its anonymous billing counts.
func TestDataPageExportAndDeletion(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	other := f.browser(t)
	other.signup("bob@example.com")
	// A retained result of the account, as the usage log keeps it.
	pgtest.Exec(t, f.pool, `INSERT INTO usage_log (account_id, item_key, route, email_domain, snapshot)
		VALUES ($1, 'r-1', 'verify', 'acme.example', '{"email":"zoe@acme.example","status":"deliverable"}')`, acct)

	resp, page := b.get("/dashboard/settings/data")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, acct) || !strings.Contains(page, `id="export-data"`) {
		t.Fatalf("data page: %d\n%s", resp.StatusCode, page)
	}
	resp, body := b.get("/dashboard/settings/data/export")
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("export: %d %v", resp.StatusCode, resp.Header)
	}
	var doc struct {
		Account struct {
			AccountID string `json:"account_id"`
		} `json:"account"`
		Users   []struct{ Email string } `json:"users"`
		Results []struct {
			Result struct{ Email string } `json:"result"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, body)
	}
	if doc.Account.AccountID != acct || len(doc.Users) != 1 || doc.Users[0].Email != "ann@example.com" ||
		len(doc.Results) != 1 || doc.Results[0].Result.Email != "zoe@acme.example" || strings.Contains(body, "argon2") {
		t.Errorf("export: %s", body)
	}

	var exported int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE account_id = $1 AND kind = 'account_exported'
		AND actor = 'ann@example.com'`, acct).Scan(&exported), "export events")
	if exported != 1 {
		t.Errorf("%d account_exported events by ann@example.com after one export, want 1", exported)
	}

	del := func(form url.Values) (*http.Response, string) { return b.post("/dashboard/settings/data/delete", form) }
	token := b.csrf("/dashboard/settings/data")
	if resp, _ := del(url.Values{"confirm": {"ann@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("deletion without CSRF: %d", resp.StatusCode)
	}
	if resp, _ := del(url.Values{"csrf": {other.csrf("/dashboard/settings/data")}, "confirm": {"ann@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("deletion with another session's token: %d", resp.StatusCode)
	}
	if resp, body := del(url.Values{"csrf": {token}, "confirm": {"bob@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(body, "Type your email address") {
		t.Errorf("deletion with the wrong email typed: %d", resp.StatusCode)
	}
	if resp, _ := del(url.Values{"csrf": {token}, "confirm": {"ann@example.com"}, "password": {"not the password"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("deletion with a wrong password: %d", resp.StatusCode)
	}
	var refused int
	pgtest.Must(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_events WHERE account_id = $1
		AND kind = 'account_deleted' AND outcome = 'failure' AND detail = 'wrong password' AND actor = 'ann@example.com'`, acct).Scan(&refused), "refusal event")
	if refused != 1 {
		t.Errorf("%d audit events for the wrong password on the deletion form, want 1", refused)
	}
	pgtest.Exec(t, f.pool, `UPDATE accounts SET tier = 'builder', subscription_status = 'active' WHERE id = $1`, acct)
	if resp, body := del(url.Values{"csrf": {token}, "confirm": {"ann@example.com"}, "password": {testPassword}}); resp.StatusCode != http.StatusConflict ||
		!strings.Contains(body, "Cancel it on the Billing page") {
		t.Errorf("deletion of a paying account: %d", resp.StatusCode)
	}
	if hits := privacytest.Find(t, f.pool, "ann@example.com"); len(hits) == 0 {
		t.Fatal("a refused deletion deleted the account")
	}
	pgtest.Exec(t, f.pool, `UPDATE accounts SET tier = 'free', subscription_status = 'canceled' WHERE id = $1`, acct)

	resp, body = del(url.Values{"csrf": {token}, "confirm": {" Ann@Example.com "}, "password": {testPassword}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "were deleted") {
		t.Fatalf("deletion: %d\n%s", resp.StatusCode, body)
	}
	if c := sessionCookie(resp); c == nil || c.MaxAge >= 0 {
		t.Errorf("the session cookie was not cleared: %v", c)
	}
	if resp, _ := b.get("/dashboard/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the dashboard after the deletion: %d", resp.StatusCode)
	}
	for _, needle := range []string{"ann@example.com", "zoe@acme.example"} {
		if hits := privacytest.Find(t, f.pool, needle); len(hits) > 0 {
			t.Errorf("%s is still stored in %v", needle, hits)
		}
	}
	for _, h := range privacytest.Find(t, f.pool, acct) {
		if h != "accounts.id" && h != "usage_monthly.account_id" && h != "usage_daily.account_id" && h != "audit_events.account_id" {
			t.Errorf("the deleted account's id is still in %s", h)
		}
	}
	// The other account signs in and works as before.
	if resp, _ := other.get("/dashboard/"); resp.StatusCode != http.StatusOK {
		t.Errorf("the other account's dashboard: %d", resp.StatusCode)
	}
	var n int
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_users WHERE email = 'bob@example.com'`).Scan(&n), "bob")
	if n != 1 {
		t.Error("the other account's user is gone")
	}
}

// A person deletes the account in a browser: Settings, the data page, the typed email and the
// password, the button; the page says it is done and the dashboard asks for a sign-in again.
func TestDataPageDeletionInBrowser(t *testing.T) {
	bin := chromiumtest.Path(t)
	f := newFixture(t, nil)
	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	run := chromiumtest.Steps(t, ctx)
	// An unconfirmed account may still delete itself: Settings and its data page stay open.
	run("sign up", signUp(f.srv.URL, "ann@example.com", chromedp.WaitVisible(chromedp.CSS("#confirm-state")))...)
	acct := f.accountOf(t, "ann@example.com")
	run("open the data page", chromedp.Navigate(f.srv.URL+"/dashboard/settings"),
		chromedp.Click(chromedp.CSS("#data-link")), chromedp.WaitVisible(chromedp.CSS("#delete-account")))
	run("type a wrong email", chromedp.SendKeys(chromedp.CSS("#confirm"), "someone@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS("#delete-account")), chromedp.WaitVisible(chromedp.CSS("#error")))
	if hits := privacytest.Find(t, f.pool, "ann@example.com"); len(hits) == 0 {
		t.Fatal("a wrong confirmation deleted the account")
	}
	run("delete", chromedp.SendKeys(chromedp.CSS("#confirm"), "ann@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.Click(chromedp.CSS("#delete-account")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	if hits := privacytest.Find(t, f.pool, "ann@example.com"); len(hits) > 0 {
		t.Errorf("the account's email is still in %v", hits)
	}
	var deleted bool
	pgtest.Must(t, f.pool.QueryRow(context.Background(), `SELECT deleted_at IS NOT NULL FROM accounts WHERE id = $1`, acct).Scan(&deleted), "tombstone")
	if !deleted {
		t.Error("the account is not marked deleted")
	}
	run("the dashboard asks for a sign-in", chromedp.Navigate(f.srv.URL+"/dashboard/"), chromedp.WaitVisible(chromedp.CSS("#signin")))
}

// A HEAD of the export download answers its headers without building the document: it reads
// none of the account's data (a table the export reads, locked by another transaction, does not
// hold it up) and writes no account_exported event, since nothing was exported.
func TestDataExportHeadBuildsNothing(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	ctx := context.Background()
	lock, err := f.pool.Begin(ctx)
	pgtest.Must(t, err, "begin")
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, `LOCK TABLE usage_log IN ACCESS EXCLUSIVE MODE`)
	pgtest.Must(t, err, "lock usage_log")

	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, b.base+"/dashboard/settings/data/export", nil)
	c := *b.c
	c.Timeout = 3 * time.Second
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("HEAD of the export while usage_log is locked: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("HEAD of the export: %d %v", resp.StatusCode, resp.Header)
	}
	pgtest.Must(t, lock.Rollback(ctx), "unlock")
	var exported int
	pgtest.Must(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE account_id = $1 AND kind = 'account_exported'`, acct).Scan(&exported), "export events")
	if exported != 0 {
		t.Errorf("%d account_exported events after a HEAD, want none", exported)
	}
}
