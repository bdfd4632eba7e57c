package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/mailsink"
	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// confirmByMail opens the confirmation link the sink received for email in the browser (on base,
// the test server, rather than the link's MAILVET_PUBLIC_URL) and presses its button.
func confirmByMail(t *testing.T, sink *mailsink.Sink, base, email string) []chromedp.Action[chromedp.Void] {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	m, err := sink.Next(ctx, email)
	if err != nil {
		t.Fatal(err)
	}
	links := m.Links()
	if len(links) != 1 {
		t.Fatalf("confirmation mail with %d links:\n%s", len(links), m.Body)
	}
	u, err := url.Parse(links[0])
	if err != nil {
		t.Fatal(err)
	}
	return []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + u.RequestURI()), chromedp.Click(chromedp.CSS("#confirm"))}
}

// signUp fills in and sends the sign-up form on base (the test server) for email, with
// testPassword, then does then: the first step of every browser journey here.
func signUp(base, email string, then ...chromedp.Action[chromedp.Void]) []chromedp.Action[chromedp.Void] {
	return append([]chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/dashboard/signup"),
		chromedp.SendKeys(chromedp.CSS("#email"), email),
		chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.SendKeys(chromedp.CSS("#password_confirm"), testPassword),
		chromedp.Click(chromedp.CSS("#signup"))}, then...)
}

// signUpAndConfirm starts a journey that needs a confirmed account (keys, the playground, the
// pages behind them): it signs up as email on base, waits for the page that asks for the
// confirmation (its button to send the link again visible), confirms as the mailed link would,
// and waits for the overview. The mail is read only once the sign-up has sent it.
func signUpAndConfirm(t *testing.T, run chromiumtest.Run, sink *mailsink.Sink, base, email string) {
	t.Helper()
	run("sign up", signUp(base, email, chromedp.WaitVisible(chromedp.CSS("#resend")))...)
	run("confirm the email", append(confirmByMail(t, sink, base, email), chromedp.WaitVisible(chromedp.CSS("#tier")))...)
}

// The journey of a new customer in a real browser: sign up, find the link in the mail (the
// fixture's sink), confirm, and create a key — refused before the confirmation, created after.
func TestSignupConfirmAndCreateKeyInBrowser(t *testing.T) {
	bin := chromiumtest.Path(t)
	f := newFixture(t, nil)
	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	run := chromiumtest.Steps(t, ctx)
	run("sign up", signUp(f.srv.URL, "new@example.com", chromedp.WaitVisible(chromedp.CSS("#confirm-state")))...)
	run("keys before the confirmation", chromedp.Navigate(f.srv.URL+"/dashboard/keys"), chromedp.WaitVisible(chromedp.CSS("#resend")))
	if n := f.keyCount(t, "new@example.com"); n != 0 {
		t.Fatalf("%d keys before the confirmation", n)
	}
	run("confirm the email", confirmByMail(t, f.sink, f.srv.URL, "new@example.com")...)
	run("overview after the confirmation", chromedp.WaitVisible(chromedp.CSS("#tier")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	run("create a key", chromedp.Navigate(f.srv.URL+"/dashboard/keys"),
		chromedp.SendKeys(chromedp.CSS("#label"), "production"), chromedp.Click(chromedp.CSS("#create-key")),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	if n := f.keyCount(t, "new@example.com"); n != 1 {
		t.Fatalf("%d keys after creating one", n)
	}
}

// What needs a browser, on a phone's width (375 px): a double click on a form sends one
// request (static/app.js); the Keys page's Revoke buttons are on screen, not in a table that
// scrolls sideways; the playground's field names are not split; the page's icon is the
// dashboard's own, so the browser never asks for /favicon.ico. The whole journey is in
// cmd/api's TestDashboardInBrowser.
func TestPhoneLayoutAndDoubleSubmit(t *testing.T) {
	bin := chromiumtest.Path(t)
	f := newFixture(t, nil)
	f.svc.delay = 700 * time.Millisecond // a request in flight for as long as a person takes to click twice
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		f.h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	requested := func(path string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(paths, path)
	}

	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	run := chromiumtest.Steps(t, ctx)
	eval := func(js string) bool {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return ok
	}
	run("phone width", chromedp.EmulateViewport(375, 800))
	signUpAndConfirm(t, run, f.sink, srv.URL, "ann@example.com")
	for _, label := range []string{"production with a long label", "staging"} {
		run("create key "+label, chromedp.Navigate(srv.URL+"/dashboard/keys"),
			chromedp.SendKeys(chromedp.CSS("#label"), label), chromedp.Click(chromedp.CSS("#create-key")),
			chromedp.WaitVisible(chromedp.CSS("#new-key")))
	}
	if !eval(`[...document.querySelectorAll("#keys button")].length === 2 &&
		[...document.querySelectorAll("#keys button")].every(b => b.getBoundingClientRect().right <= innerWidth)`) {
		t.Error("a Revoke button is off screen at 375 px")
	}
	if !eval(`[...document.querySelectorAll(".scroll")].every(s => s.scrollWidth <= s.clientWidth)`) {
		t.Error("the keys table scrolls sideways at 375 px")
	}

	// A real double click on Verify while the first request is in flight.
	run("playground", chromedp.Navigate(srv.URL+"/dashboard/playground"),
		chromedp.SendKeys(chromedp.CSS("#email"), "not-an-address")) // decided by the local layers: no worker needed
	var box []float64
	var err error
	if box, err = chromedp.Run(ctx, chromedp.Evaluate[[]float64](
		`(r => [r.x + r.width / 2, r.y + r.height / 2])(document.querySelector("#verify").getBoundingClientRect())`)); err != nil {
		t.Fatal(err)
	}
	before := f.svc.calls.Load()
	run("double click", chromedp.MouseClickXY(box[0], box[1]), chromedp.Sleep(80*time.Millisecond),
		chromedp.MouseClickXY(box[0], box[1], chromedp.ClickCount(2)),
		chromedp.WaitVisible(chromedp.CSS(`#result tr[data-field="status"]`)))
	time.Sleep(time.Second) // a second request would have reached the service by now
	if n := f.svc.calls.Load() - before; n != 1 {
		t.Errorf("a double click sent %d verify requests, want 1", n)
	}
	if !eval(`[...document.querySelectorAll("#result th code")].every(c => c.getClientRects().length === 1 && c.offsetHeight < 30)`) {
		t.Error("a field name is split over two lines at 375 px")
	}

	deadline := time.Now().Add(3 * time.Second)
	for !requested("/dashboard/static/favicon.svg") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !requested("/dashboard/static/favicon.svg") || requested("/favicon.ico") {
		mu.Lock()
		t.Errorf("the browser's icon requests: want favicon.svg and no /favicon.ico, got %v", paths)
		mu.Unlock()
	}
}

// At a phone's width (375 px) no dashboard page is wider than the screen: the lists and the
// delivery attempts stack each row, every cell named by its column, instead of hiding columns
// past the edge (issue 32); long names, URLs and errors wrap.
func TestPhoneWidthNothingOverflows(t *testing.T) {
	bin := chromiumtest.Path(t)
	f := newFixture(t, nil)
	// Lists whose names and numbers are as long as they get.
	created := time.Date(2026, 11, 23, 8, 41, 0, 0, time.UTC)
	for _, name := range []string{"customers-export-2026-11-28-final-final-v2-with-all-the-columns.csv", "leads", ""} {
		f.svc.listed = append(f.svc.listed, list.List{ID: uuid.New(), Name: name, State: list.Running, Format: list.CSV, Columns: []string{"email"},
			Rows: 1000000, Unique: 987654, Verified: 123456, CreatedAt: created})
	}
	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	run := chromiumtest.Steps(t, ctx)
	run("phone width", chromedp.EmulateViewport(375, 800))
	signUpAndConfirm(t, run, f.sink, f.srv.URL, "ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	run("create a key", chromedp.Navigate(f.srv.URL+"/dashboard/keys"),
		chromedp.SendKeys(chromedp.CSS("#label"), "production"), chromedp.Click(chromedp.CSS("#create-key")),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	const job, delivery = "0b6f7d8e-1111-4c3e-9a55-000000000009", "0b6f7d8e-2222-4c3e-9a55-000000000009"
	pgtest.Exec(t, f.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'x@acme.example', $3, 'completed')`,
		job, acct, "https://hooks.customer-with-a-long-name.example/mailvet/webhooks/verification-results?tenant=4242")
	pgtest.Exec(t, f.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts, finished_at) VALUES ($1, $2, $3, $4, '{}', 'failed', 2, now())`,
		delivery, job, acct, "https://hooks.customer-with-a-long-name.example/mailvet/webhooks/verification-results?tenant=4242")
	for i, e := range []string{"dial tcp 203.0.113.7:443: connect: connection timed out after 10s waiting for the receiver", "HTTP 500"} {
		pgtest.Exec(t, f.pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, http_status, error) VALUES ($1, $2, now(), 10000, NULL, $3)`,
			delivery, i+1, e)
	}
	for _, path := range []string{"/dashboard/", "/dashboard/lists", "/dashboard/deliveries", "/dashboard/keys", "/dashboard/settings", "/dashboard/billing", "/dashboard/playground"} {
		run(path, chromedp.Navigate(f.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("main")))
		over, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
			const w = document.documentElement.clientWidth;
			if (document.documentElement.scrollWidth > w || document.body.scrollWidth > w) return "the page is " + document.documentElement.scrollWidth + " px wide";
			const wide = [...document.querySelectorAll("main *")].find(e => e.getBoundingClientRect().right > w + 0.5 && !e.closest(".scroll, pre"));
			if (wide) return wide.tagName + (wide.id ? "#" + wide.id : "") + " ends at " + wide.getBoundingClientRect().right + " px";
			const scrolls = [...document.querySelectorAll(".scroll")].find(s => s.scrollWidth > s.clientWidth);
			return scrolls ? "a table scrolls sideways: " + scrolls.firstElementChild.outerHTML.slice(0, 80) : "";
		})()`))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if over != "" {
			t.Errorf("%s at 375 px: %s", path, over)
		}
	}
	// Every stacked cell names its column.
	run("deliveries", chromedp.Navigate(f.srv.URL+"/dashboard/deliveries"), chromedp.WaitVisible(chromedp.CSS("main")))
	labels, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("table.stack tbody tr:first-child td")].map(td => getComputedStyle(td, "::before").content)`))
	if err != nil || len(labels) != 5 || labels[0] != `"Attempt"` || labels[4] != `"Error"` {
		t.Errorf("the delivery attempts' cell labels at 375 px: %q %v", labels, err)
	}
}
