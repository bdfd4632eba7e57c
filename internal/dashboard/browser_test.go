package dashboard

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
)

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
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	eval := func(js string) bool {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return ok
	}
	run("sign up", chromedp.EmulateViewport(375, 800), chromedp.Navigate(srv.URL+"/dashboard/signup"),
		chromedp.SendKeys(chromedp.CSS("#email"), "ann@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), testPassword),
		chromedp.SendKeys(chromedp.CSS("#password_confirm"), testPassword),
		chromedp.Click(chromedp.CSS("#signup")), chromedp.WaitVisible(chromedp.CSS("#tier")))
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
