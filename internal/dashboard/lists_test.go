package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verification"
)

const (
	testListID = "0b6f7d8e-3333-4c3e-9a55-0000000000c1"
	textListID = "0b6f7d8e-3333-4c3e-9a55-0000000000c2" // testList, uploaded as text
)

// testList is a running list of 10,000 unique addresses, 100 of them verified at 1.3 a second,
// created at 08:41:33 and kept until a month later (to the microsecond, as Postgres keeps times).
func testList(id string, format list.Format) list.List {
	created := time.Date(2026, 11, 23, 8, 41, 33, 0, time.UTC)
	started := time.Now().Add(-76923 * time.Millisecond) // 100 / 1.3 s
	expires := time.Date(2026, 12, 23, 8, 41, 33, 123456000, time.UTC)
	return list.List{ID: uuid.MustParse(id), Name: "june", Format: format, Columns: []string{"email"}, State: list.Running,
		Rows: 12000, Unique: 10000, Verified: 100, CreatedAt: created, StartedAt: &started, ExpiresAt: &expires,
		Counts: []list.Count{{Status: "deliverable", Reason: "accepted", N: 100}}}
}

// listsFixture is a signed-in browser with a standard key, against the service with the two test
// lists.
func listsFixture(t *testing.T, env map[string]string) (*fixture, *testService, *browser, string) {
	t.Helper()
	f := newFixture(t, env)
	f.svc.fixed = map[uuid.UUID]list.List{
		uuid.MustParse(testListID): testList(testListID, list.CSV),
		uuid.MustParse(textListID): testList(textListID, list.Text),
	}
	b := f.browser(t)
	b.signup("ann@example.com")
	k, err := account.NewStore(f.pool).CreateStandardKey(context.Background(), f.accountOf(t, "ann@example.com"), "lists",
		func(plan.Tier) int { return 10 })
	if err != nil {
		t.Fatal(err)
	}
	return f, f.svc, b, k.ID
}

var uploadTokenRE = regexp.MustCompile(`name="upload_token" value="([^"]+)"`)

// Two POSTs of one rendered upload form, 30 ms apart as a double click sends them, upload (and
// bill) the file once: both end on the list the first created, and so does a third, later one.
func TestUploadFormIsIdempotent(t *testing.T) {
	f, api, b, key := listsFixture(t, nil)
	api.delay = 300 * time.Millisecond // the second arrives while the first is on its way
	_, page := b.get("/dashboard/lists")
	token := uploadTokenRE.FindStringSubmatch(page)
	if token == nil {
		t.Fatalf("no upload token in the form:\n%s", page)
	}
	fields := [][2]string{{"csrf", b.csrf("/dashboard/lists")}, {"upload_token", token[1]}, {"key_id", key}, {"file", "june.csv"}}
	var (
		wg        sync.WaitGroup
		locations [2]string
	)
	for i := range locations {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 30 * time.Millisecond)
			resp, body := b.uploadParts(fields, "email\nann@acme.example\n")
			if resp.StatusCode != http.StatusSeeOther {
				t.Errorf("upload %d: %d\n%s", i, resp.StatusCode, body)
			}
			locations[i] = resp.Header.Get("Location")
		})
	}
	wg.Wait()
	if !strings.HasPrefix(locations[0], "/dashboard/lists/") || locations[0] != locations[1] {
		t.Fatalf("the two POSTs went to %q and %q, want the same list", locations[0], locations[1])
	}
	resp, _ := b.uploadParts(fields, "email\nann@acme.example\n")
	if resp.Header.Get("Location") != locations[0] {
		t.Fatalf("a later POST of the form went to %q, want %q", resp.Header.Get("Location"), locations[0])
	}
	if n := f.svc.uploads.Load(); n != 1 {
		t.Fatalf("the service got %d uploads of one form, want 1", n)
	}
	// A newly rendered form is a new upload.
	_, page = b.get("/dashboard/lists")
	fields[1][1] = uploadTokenRE.FindStringSubmatch(page)[1]
	if resp, _ := b.uploadParts(fields, "email\nann@acme.example\n"); resp.Header.Get("Location") == locations[0] {
		t.Fatal("a new form went to the previous form's list")
	}
	if n := f.svc.uploads.Load(); n != 2 {
		t.Fatalf("the service got %d uploads of two forms, want 2", n)
	}

	// A claim left by an upload that died on the way (its replica killed: no list, no release)
	// is taken over once it is older than any upload can take, not waited for forever.
	_, page = b.get("/dashboard/lists")
	fields[1][1] = uploadTokenRE.FindStringSubmatch(page)[1]
	pgtest.Exec(t, f.pool, `INSERT INTO dashboard_upload_tokens (account_id, token_hash, created_at) VALUES ($1, $2, now() - interval '26 minutes')`,
		f.accountOf(t, "ann@example.com"), tokenHash(fields[1][1]))
	if resp, body := b.uploadParts(fields, "email\nann@acme.example\n"); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/dashboard/lists/") {
		t.Fatalf("a POST of a form whose first upload died: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if n := f.svc.uploads.Load(); n != 3 {
		t.Fatalf("the service got %d uploads, want 3", n)
	}
}

// A refused upload keeps what the user chose in the form: format, column, name and key.
func TestUploadErrorKeepsTheForm(t *testing.T) {
	_, _, b, key := listsFixture(t, nil)
	fields := [][2]string{{"csrf", b.csrf("/dashboard/lists")}, {"format", "csv"}, {"column", "Mail"}, {"name", "june"},
		{"key_id", key}, {"file", ""}}
	resp, body := b.uploadParts(fields, "")
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Choose the file to upload.") {
		t.Fatalf("upload without a file: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{`<option value="csv" selected>`, `name="column" maxlength="200" placeholder="found from the header when empty" value="Mail"`,
		`name="name" maxlength="200" value="june"`, `value="` + key + `" selected`} {
		if !strings.Contains(body, want) {
			t.Errorf("the refused form lost %s", want)
		}
	}
}

// An upload from a tab whose session was signed out in another tab gets the sign-in page, saying
// why, even when it is 8 MB: the body is read before the redirect, so the browser is not cut off
// mid-send (a connection reset, which Chromium shows as "This site can't be reached"). The
// client here is a plain connection that sends the whole request before it reads the answer, as
// a browser does; Go's own client would hide a reset that comes after the answer.
func TestUploadAfterSignoutRedirects(t *testing.T) {
	f, _, b, key := listsFixture(t, nil)
	csrf := b.csrf("/dashboard/lists")
	u, _ := url.Parse(f.srv.URL + "/dashboard/")
	b.post("/dashboard/signout", url.Values{"csrf": {csrf}})
	// What the browser holds after signing out in this tab or another: what the sign-out set.
	var cookie *http.Cookie
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == SessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("after sign-out the browser holds no session cookie: another tab's request could not be told from a stranger's")
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("csrf", csrf)
	_ = mw.WriteField("key_id", key)
	fw, _ := mw.CreateFormFile("file", "big.txt")
	_, _ = io.WriteString(fw, strings.Repeat("user@example.com\n", 8<<20/17))
	_ = mw.Close()

	send := func(cookieHeader string) (*http.Response, error) {
		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		head := fmt.Sprintf("POST /dashboard/lists HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n",
			mw.FormDataContentType(), form.Len(), cookieHeader)
		if _, err := io.WriteString(conn, head); err != nil {
			return nil, err
		}
		if _, err := conn.Write(form.Bytes()); err != nil {
			return nil, fmt.Errorf("sending the body: %w", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := send("Cookie: " + cookie.Name + "=" + cookie.Value + "\r\n")
	if err != nil {
		t.Fatalf("8 MB upload after sign-out: %v", err)
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/signin?ended=1" {
		t.Fatalf("8 MB upload after sign-out: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Without a cookie of ours nothing asked for the body, and it is not read.
	if _, err := send(""); err == nil {
		t.Fatal("an 8 MB upload without a session cookie was read to its end")
	}
	if n := f.svc.uploads.Load(); n != 0 {
		t.Fatalf("%d uploads reached the service", n)
	}
}

// The one error mapping's refusals are worded for the dashboard: their message about the
// request, and what to click or wait for instead of the API's routes, fields and headers.
func TestProblemTextIsForTheDashboard(t *testing.T) {
	reset := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"rate limit", &usage.RateLimited{Limit: 10, Used: 10, Asked: 1, Reset: time.Now().Add(41500 * time.Millisecond)},
			"Rate limit of 10 emails per minute exceeded for this account. Try again in 42 s."},
		{"larger than a minute", &usage.RateLimited{Limit: 10, Used: 0, Asked: 25, Reset: time.Now().Add(time.Minute)},
			"Rate limit of 10 emails per minute exceeded for this account. Send at most 10 addresses at a time."},
		{"quota reached", &usage.QuotaExceeded{Limit: 500, Used: 500, Asked: 1, Reset: reset},
			"Monthly quota of 500 verifications reached (500 used). Wait until the quota renews on 2026-12-01 00:00 UTC, or upgrade on the Billing page."},
		{"larger than the quota", &usage.QuotaExceeded{Limit: 500, Used: 100, Asked: 900, Reset: reset},
			"This request needs 900 verifications, more than the whole monthly quota of 500. Split it into lists of at most 500 addresses, or upgrade on the Billing page."},
		{"quota left", &usage.QuotaExceeded{Limit: 500, Used: 100, Asked: 450, Reset: reset},
			"This request needs 450 verifications; 400 of the monthly quota of 500 are left (100 used). Verify at most 400 more addresses, wait until the quota renews on 2026-12-01 00:00 UTC, or upgrade on the Billing page."},
		{"bad file", &list.InputError{Line: 3, Msg: "no email column"},
			"The file cannot be read: line 3: no email column. Nothing was stored or charged. Correct it and try again."},
		{"finished", list.ErrFinished,
			"The list has already finished. There is nothing to cancel: download its results, or delete it."},
		{"outage", &verification.UnavailableError{Cause: queue.ErrNoWorkers},
			"Verification is temporarily unavailable: no verifier worker is running. Try again in 2 s; nothing was charged."},
		{"unknown", errors.New("something new"), "Internal server error. Try again in a moment; if it keeps failing, contact support."},
	}
	h := &Handler{log: slog.New(slog.DiscardHandler)}
	r := httptest.NewRequest(http.MethodPost, "/dashboard/lists", nil)
	for _, c := range cases {
		if got := problemText(h.problemOf(r, c.err)); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	for s, want := range map[int]string{0: "1 s", 59: "59 s", 60: "1 min", 61: "2 min", 3599: "60 min", 3600: "1 h", 7500: "2 h 5 min", 7199: "2 h"} {
		if got := durationText(s); got != want {
			t.Errorf("durationText(%d) = %q, want %q", s, got, want)
		}
	}
}

// A list's page shows times as the other pages do and the time left in minutes or hours;
// cancelling a list that has finished (from another tab) shows the list's page with the reason.
func TestListPageWording(t *testing.T) {
	_, api, b, _ := listsFixture(t, nil)
	resp, body := b.get("/dashboard/lists/" + testListID)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list page: %d\n%s", resp.StatusCode, body)
	}
	// 9,900 addresses left at 1.3 a second: 7,616 s.
	for _, want := range []string{"<dd>2026-11-23 08:41 UTC</dd>", "<dd>2026-12-23 08:41 UTC</dd>", "about 2 h 7 min left"} {
		if !strings.Contains(body, want) {
			t.Errorf("the list page lacks %q", want)
		}
	}
	if strings.Contains(body, "T08:41") {
		t.Error("the list page shows an RFC 3339 time")
	}
	// A CSV's address column is named; a text file has no columns.
	if !strings.Contains(body, "<dd>csv, column “email”</dd>") {
		t.Error("a CSV list's page does not name its column")
	}
	if _, body := b.get("/dashboard/lists/" + textListID); !strings.Contains(body, "<dd>text</dd>") {
		t.Errorf("a text list's page names a column:\n%s", body)
	}
	resp, body = b.post("/dashboard/lists/"+testListID+"/cancel", url.Values{"csrf": {b.csrf("/dashboard/lists")}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `id="list-state"`) ||
		!strings.Contains(body, "The list has already finished.") || strings.Contains(body, "DELETE /v1") {
		t.Fatalf("cancel of a finished list: %d\n%s", resp.StatusCode, body)
	}
	if api.cancels.Load() != 1 {
		t.Fatalf("%d cancels reached the service", api.cancels.Load())
	}
}

// Deleting a list takes two steps, both plain forms: the button asks, the answer deletes.
func TestListDeleteAsksFirst(t *testing.T) {
	_, api, b, _ := listsFixture(t, nil)
	csrf := b.csrf("/dashboard/lists")
	resp, _ := b.post("/dashboard/lists/"+testListID+"/delete", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/lists/"+testListID+"?confirm=delete" {
		t.Fatalf("first click: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if api.deletes.Load() != 0 {
		t.Fatal("one click deleted the list")
	}
	_, body := b.get(resp.Header.Get("Location"))
	if !strings.Contains(body, `id="confirm-delete-list"`) || !strings.Contains(body, `name="confirm" value="yes"`) ||
		strings.Contains(body, `http-equiv="refresh"`) {
		t.Fatalf("the question page:\n%s", body)
	}
	if resp, _ := b.post("/dashboard/lists/"+testListID+"/delete", url.Values{"csrf": {"wrong"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("confirmation without CSRF: %d", resp.StatusCode)
	}
	resp, _ = b.post("/dashboard/lists/"+testListID+"/delete", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/lists?done=list-deleted" || api.deletes.Load() != 1 {
		t.Fatalf("confirmed: %d %s, %d deletes", resp.StatusCode, resp.Header.Get("Location"), api.deletes.Load())
	}
}

// A browser whose session ended is sent to sign in with the reason and the page it was on; only
// a local dashboard page is ever kept as that page.
func TestSigninAgainReturnsToThePage(t *testing.T) {
	f, _, b, _ := listsFixture(t, nil)
	csrf := b.csrf("/dashboard/lists")
	pgExecSessionsExpire(t, f)
	resp, _ := b.get("/dashboard/deliveries?state=failed")
	if want := "/dashboard/signin?ended=1&next=%2Fdashboard%2Fdeliveries%3Fstate%3Dfailed"; resp.Header.Get("Location") != want {
		t.Fatalf("expired GET: %s, want %s", resp.Header.Get("Location"), want)
	}
	// A form posted from a signed-out tab comes back to the form's page (its Referer).
	req, _ := http.NewRequest(http.MethodPost, b.base+"/dashboard/keys", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", b.base+"/dashboard/keys")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The cookie was cleared by the first redirect: a browser without one gets no "ended".
	if want := "/dashboard/signin?next=%2Fdashboard%2Fkeys"; resp.Header.Get("Location") != want {
		t.Fatalf("POST from a signed-out tab: %s, want %s", resp.Header.Get("Location"), want)
	}
	for p, want := range map[string]string{
		"/dashboard/lists/x?a=b":          "/dashboard/lists/x?a=b",
		"/dashboard/":                     "/dashboard/",
		"/dashboard":                      "",
		"//evil.example/dashboard/":       "",
		"https://evil.example/dashboard/": "",
		"/dashboard/../admin":             "",
		"/dashboard/%2e%2e/admin":         "",
		"/dashboard//evil.example":        "",
		"/dashboard/\\evil.example":       "",
		"/dashboard/x#frag":               "",
		"/dashboard/signin?next=x":        "",
		"/dashboard/signout":              "",
		"/dashboard/static/app.js":        "",
		"/dashboard/\nx":                  "",
		"/other":                          "",
		"javascript:alert(1)":             "",
	} {
		if got := safeReturn(p); got != want {
			t.Errorf("safeReturn(%q) = %q, want %q", p, got, want)
		}
	}
}

func pgExecSessionsExpire(t *testing.T, f *fixture) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), `UPDATE dashboard_sessions SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxListsAreMarked: a list uploaded with a sandbox key is marked as such on the lists
// page and on its own page, where its results, answered from the magic addresses
// (docs/sandbox.md), could otherwise pass for a real verification; a live list is not.
func TestSandboxListsAreMarked(t *testing.T) {
	_, svc, b, _ := listsFixture(t, nil)
	l := svc.fixed[uuid.MustParse(textListID)]
	l.Sandbox = true
	svc.fixed[l.ID] = l
	svc.listed = []list.List{svc.fixed[uuid.MustParse(testListID)], l}
	_, body := b.get("/dashboard/lists")
	if n := strings.Count(body, `class="badge sandbox"`); n != 1 {
		t.Errorf("the lists page marks %d lists as sandbox, want 1:\n%s", n, body)
	}
	if _, body := b.get("/dashboard/lists/" + textListID); !strings.Contains(body, `class="badge sandbox"`) {
		t.Errorf("the sandbox list's page does not say so:\n%s", body)
	}
	if _, body := b.get("/dashboard/lists/" + testListID); strings.Contains(body, `class="badge sandbox"`) {
		t.Errorf("a live list's page says sandbox:\n%s", body)
	}
}
