package api

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// The dashboard is a thin adapter of the verification service, as the verify and list routes
// are (docs/architecture.md, "Verification service"): what a customer verifies in the playground
// or uploads on the Lists page is admitted, held, billed and refused exactly as the same request
// with the same key through the API. These tests drive the dashboard this server mounts, with a
// real verifier worker.

// dashboardClient is a browser on the server's dashboard, signed up as a new customer.
type dashboardClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

var dashboardCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func newDashboardClient(t *testing.T, b *verifyBundle, email string) (*dashboardClient, string) {
	t.Helper()
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	d := &dashboardClient{t: t, base: srv.URL, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	const password = "a long enough password for the test"
	resp, body := d.post("/dashboard/signup", url.Values{"csrf": {d.csrf("/dashboard/signup")}, "email": {email},
		"password": {password}, "password_confirm": {password}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-up: %d\n%s", resp.StatusCode, body)
	}
	var acct string
	if err := b.pool.QueryRow(context.Background(), `SELECT account_id FROM dashboard_users WHERE email = $1`, email).Scan(&acct); err != nil {
		t.Fatal(err)
	}
	// Confirmed, as by the mailed link (docs/dashboard.md, "Email confirmation"): keys, the
	// playground and the list pages need it.
	if _, err := b.pool.Exec(context.Background(), `UPDATE accounts SET email_unconfirmed = false WHERE id = $1`, acct); err != nil {
		t.Fatal(err)
	}
	return d, acct
}

func (d *dashboardClient) do(req *http.Request) (*http.Response, string) {
	d.t.Helper()
	resp, err := d.c.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (d *dashboardClient) csrf(path string) string {
	d.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, d.base+path, nil)
	_, body := d.do(req)
	m := dashboardCSRF.FindStringSubmatch(body)
	if m == nil {
		d.t.Fatalf("no CSRF token on %s", path)
	}
	return m[1]
}

func (d *dashboardClient) post(path string, form url.Values) (*http.Response, string) {
	d.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return d.do(req)
}

// upload sends the Lists page's form with key keyID and file as a CSV.
func (d *dashboardClient) upload(keyID, name, file string) (*http.Response, string) {
	d.t.Helper()
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("csrf", d.csrf("/dashboard/lists"))
	_ = mw.WriteField("key_id", keyID)
	_ = mw.WriteField("format", "csv")
	_ = mw.WriteField("name", name)
	fw, _ := mw.CreateFormFile("file", name+".csv")
	_, _ = io.WriteString(fw, file)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, d.base+"/dashboard/lists", &form)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return d.do(req)
}

// htmlText is s as a page's text shows it.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

// A verification in the playground is one verify request with the chosen key: one usage row of
// route verify, billed once the result is on the page, nothing left held; a refusal is the
// API's, word for word, with its rejection row.
func TestPlaygroundIsMeteredAsTheAPI(t *testing.T) {
	b := setupVerify(t, verifyOpts{})
	d, acct := newDashboardClient(t, b, "ann@example.com")
	key := b.standardKey(acct)

	b.call(http.MethodPost, "/v1/email/verify", key.Raw, map[string]any{"email": "ann@acme.test"}).want(t, http.StatusOK, "")
	resp, body := d.post("/dashboard/playground", url.Values{"csrf": {d.csrf("/dashboard/playground")}, "key_id": {key.ID},
		"email": {"bob@acme.test"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-field="status"`) {
		t.Fatalf("playground: %d\n%s", resp.StatusCode, body)
	}
	usagetest.Settle(t, b.pool)
	rows := usagetest.Rows(t, b.pool, acct)
	if len(rows) != 2 {
		t.Fatalf("usage rows %+v, want the API's and the playground's", rows)
	}
	api, playground := rows[0], rows[1]
	if api.Route != "verify" || playground.Route != api.Route || playground.Billable != api.Billable ||
		playground.QuotaUnit != api.QuotaUnit || !usagetest.Delivered(playground) || playground.Status != api.Status {
		t.Fatalf("the playground's row %+v, want one as the API's %+v", playground, api)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota != 2 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want two quota units and nothing held", c)
	}

	// The month's quota used up: both are refused with the same words, and both refusals logged.
	limit := b.cfg.Plans.Of(plan.Free).MonthlyCalls
	usagetest.SetMonth(t, b.pool, acct, time.Now(), limit, 0)
	refusal := b.call(http.MethodPost, "/v1/email/verify", key.Raw, map[string]any{"email": "ann@acme.test"}).
		want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
	resp, body = d.post("/dashboard/playground", url.Values{"csrf": {d.csrf("/dashboard/playground")}, "key_id": {key.ID},
		"email": {"bob@acme.test"}})
	msg, _ := refusal.body["message"].(string)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, htmlText(msg)) ||
		resp.Header.Get("Retry-After") == "" {
		t.Fatalf("playground past the quota: %d, Retry-After %q, want 429 saying %q:\n%s", resp.StatusCode,
			resp.Header.Get("Retry-After"), msg, body)
	}
	// Refusal rows are written behind the responses (usage.Rejections).
	wait.For(t, 5*time.Second, "the refusal rows of the API and the playground", func() bool {
		return usagetest.Count(usagetest.Rows(t, b.pool, acct), usagetest.Refused("monthly_quota_exceeded")) == 2
	})
}

// A list uploaded on the Lists page is a list uploaded with the chosen key: the same admission
// of its unique addresses, the same usage rows once verified, nothing left held; a refusal is
// the API's, word for word.
func TestDashboardUploadIsMeteredAsTheAPI(t *testing.T) {
	b := setupVerify(t, verifyOpts{})
	d, acct := newDashboardClient(t, b, "ann@example.com")
	key := b.standardKey(acct)
	const file = "email\nann@acme.test\nbob@acme.test\nann@acme.test\n"

	up := b.upload(key.Raw, "text/csv", "?name=api", file).want(t, http.StatusAccepted, "")
	apiList, _ := up.body["id"].(string)
	resp, body := d.upload(key.ID, "dashboard", file)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/dashboard/lists/") {
		t.Fatalf("dashboard upload: %d %s\n%s", resp.StatusCode, loc, body)
	}
	dashList := strings.TrimSuffix(strings.TrimPrefix(loc, "/dashboard/lists/"), "?done=uploaded")
	a, dl := b.waitList(key.Raw, apiList, "completed"), b.waitList(key.Raw, dashList, "completed")
	if a["unique"] != dl["unique"] || a["rows"] != dl["rows"] || a["name"] != "api" || dl["name"] != "dashboard" {
		t.Fatalf("the API's list %v, the dashboard's %v: want the same file stored alike", a, dl)
	}
	usagetest.Settle(t, b.pool)
	rows := usagetest.Rows(t, b.pool, acct)
	if len(rows) != 4 || usagetest.Count(rows, usagetest.Delivered) != 4 {
		t.Fatalf("usage rows %+v, want the two unique addresses of each list, delivered", rows)
	}
	for _, r := range rows {
		if r.Route != rows[0].Route || r.QuotaUnit != rows[0].QuotaUnit || r.Billable != rows[0].Billable {
			t.Fatalf("usage rows %+v: the two lists are not metered alike", rows)
		}
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota != 4 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want four quota units and nothing held", c)
	}

	// One unit of the month left: a list of two is refused alike, and nothing is stored.
	limit := b.cfg.Plans.Of(plan.Free).MonthlyCalls
	usagetest.SetMonth(t, b.pool, acct, time.Now(), limit-1, 0)
	refusal := b.upload(key.Raw, "text/csv", "", file).want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)
	msg, _ := refusal.body["message"].(string)
	resp, body = d.upload(key.ID, "refused", file)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, htmlText(msg)) ||
		resp.Header.Get("Retry-After") != refusal.header.Get("Retry-After") {
		t.Fatalf("dashboard upload past the quota: %d, Retry-After %q, want 429 with Retry-After %q saying %q:\n%s",
			resp.StatusCode, resp.Header.Get("Retry-After"), refusal.header.Get("Retry-After"), msg, body)
	}
	var lists int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM lists WHERE account_id = $1`, acct).Scan(&lists); err != nil {
		t.Fatal(err)
	}
	if lists != 2 {
		t.Fatalf("%d lists stored, want the two admitted ones", lists)
	}
}

// The dashboard's list pages answer a list past its expires_at as the API does
// (TestListPastItsExpiryIsGoneOnEveryRoute), before a verifier's sweep has purged it: its page,
// the Lists page does not show it, the data export (Settings, Your data) leaves it out, and its
// page, both downloads, its cancel and its delete are the not-found page (docs/lists.md,
// "States").
func TestDashboardListPastItsExpiryIsNotFound(t *testing.T) {
	b := setupVerify(t, verifyOpts{noWorkers: true}) // no sweep: the rows stay in the database
	d, acct := newDashboardClient(t, b, "ann@example.com")
	key := b.standardKey(acct).Raw
	gone := b.upload(key, "text/plain", "?name=gone-list", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	b.upload(key, "text/plain", "?name=kept-list", "bob@acme.test\n").want(t, http.StatusAccepted, "")
	b.call(http.MethodPost, "/v1/email/lists/"+gone+"/cancel", key, nil).want(t, http.StatusOK, "")
	if _, err := b.pool.Exec(context.Background(), `UPDATE lists SET expires_at = now() - interval '1 second' WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, d.base+path, nil)
		return d.do(req)
	}
	if _, body := get("/dashboard/lists"); strings.Contains(body, "gone-list") || !strings.Contains(body, "kept-list") {
		t.Errorf("the Lists page shows the expired list, or not the other:\n%s", body)
	}
	if resp, body := get("/dashboard/settings/data/export"); resp.StatusCode != http.StatusOK ||
		strings.Contains(body, gone) || !strings.Contains(body, "kept-list") {
		t.Errorf("data export: %d\n%s", resp.StatusCode, body)
	}
	page := "/dashboard/lists/" + gone
	csrf := d.csrf("/dashboard/lists")
	for _, c := range []struct {
		name string
		do   func() (*http.Response, string)
	}{
		{"page", func() (*http.Response, string) { return get(page) }},
		{"CSV download", func() (*http.Response, string) { return get(page + "/download?format=csv") }},
		{"NDJSON download", func() (*http.Response, string) { return get(page + "/download?format=ndjson") }},
		{"cancel", func() (*http.Response, string) { return d.post(page+"/cancel", url.Values{"csrf": {csrf}}) }},
		{"delete, asked", func() (*http.Response, string) { return d.post(page+"/delete", url.Values{"csrf": {csrf}}) }},
		{"delete, confirmed", func() (*http.Response, string) {
			return d.post(page+"/delete", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
		}},
	} {
		if resp, body := c.do(); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "List not found") {
			t.Errorf("%s of an expired list: %d\n%s", c.name, resp.StatusCode, body)
		}
	}
}
