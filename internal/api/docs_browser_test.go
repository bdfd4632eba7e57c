package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
)

// The error reference at /docs/errors reads on a phone (375 px) without the page scrolling
// sideways (issue 32): long code words and link text wrap, a wide table scrolls inside its own
// box, and nothing else is wider than the screen.
func TestErrorDocsFitAPhone(t *testing.T) {
	bin := chromiumtest.Path(t)
	srv := httptest.NewServer(newBareServer(t).Handler())
	t.Cleanup(srv.Close)
	ctx := chromiumtest.Start(t, bin, 60*time.Second)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 800), chromedp.Navigate(srv.URL+"/docs/errors"),
		chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		t.Fatal(err)
	}
	over, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const w = document.documentElement.clientWidth;
		const wide = [...document.querySelectorAll("main *")].find(e => e.getBoundingClientRect().right > w + 0.5 && !e.closest("table, pre"));
		if (wide) return wide.tagName + " " + wide.textContent.slice(0, 60) + " ends at " + wide.getBoundingClientRect().right + " px";
		if (document.documentElement.scrollWidth > w || document.body.scrollWidth > w) return "the page is " + document.documentElement.scrollWidth + " px wide";
		return "";
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if over != "" {
		t.Errorf("/docs/errors at 375 px: %s", over)
	}
	// Tables are their own scroll boxes: the page's width never depends on them.
	tables, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("main table")].every(t =>
		getComputedStyle(t).overflowX === "auto" && t.getBoundingClientRect().right <= document.documentElement.clientWidth + 0.5)`))
	if err != nil || !tables {
		t.Errorf("a table of /docs/errors is wider than the screen: %v", err)
	}
}
