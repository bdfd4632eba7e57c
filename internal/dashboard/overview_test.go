package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// The usage period's end is exclusive: the overview names the last day it includes.
func TestPeriodText(t *testing.T) {
	month := func(y int, m time.Month) (time.Time, time.Time) {
		s := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 1, 0)
	}
	for _, c := range []struct {
		y    int
		m    time.Month
		want string
	}{{2026, time.November, "1 Nov – 30 Nov 2026"}, {2026, time.December, "1 Dec – 31 Dec 2026"}, {2028, time.February, "1 Feb – 29 Feb 2028"}} {
		if got := periodText(month(c.y, c.m)); got != c.want {
			t.Errorf("%d-%02d: %q, want %q", c.y, c.m, got, c.want)
		}
	}
	if got := periodText(time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)); got != "20 Dec 2026 – 19 Jan 2027" {
		t.Errorf("across a year: %q", got)
	}
}

// The overview says how the month's count and the chart's days relate, and why they differ when
// they do (issue 32: 448 above the chart, another total on it, no word why).
func TestReconcile(t *testing.T) {
	nov := usage.Summary{Period: usage.Period{Start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}}
	days := func(from time.Time, calls ...int) []usage.Day {
		var out []usage.Day
		for i, c := range calls {
			out = append(out, usage.Day{Date: from.AddDate(0, 0, i).Format(time.DateOnly), Calls: c})
		}
		return out
	}
	// 30 days from 24 October: 8 of October's (100 calls), then 22 of November's.
	window := days(time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), 10, 10, 10, 10, 10, 10, 10, 30, 5, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7)
	paid := nov
	paid.CallsUsed = 22
	if in, why := reconcile(paid, window, false); in != 22 || why != "" {
		t.Errorf("paid, agreeing: %d %q", in, why)
	}
	free := nov
	free.CallsUsed = 30 // 8 syntax failures or held
	in, why := reconcile(free, window, true)
	if in != 22 || !strings.Contains(why, "add up to 22 billable verifications, the count above is 30") || !strings.Contains(why, "syntax check") {
		t.Errorf("free: %d %q", in, why)
	}
	// On 31 December the 30 days start on 2 December: the 1st is outside the chart.
	dec := usage.Summary{Period: usage.Period{Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}, CallsUsed: 40}
	in, why = reconcile(dec, days(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), 1, 2, 3), false)
	if in != 6 || !strings.Contains(why, "start after the first of the month") || strings.Contains(why, "syntax") {
		t.Errorf("window after the 1st: %d %q", in, why)
	}
	// On 1 December, results of a request admitted on 30 November and answered after midnight
	// (or of a list uploaded in November) are on the chart's 1 December and billed to November
	// (docs/api.md, "GET /v1/management/usage"): reloading would not change that.
	dec.CallsUsed = 0
	in, why = reconcile(dec, days(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), append(make([]int, 29), 2)...), false)
	if in != 2 || !strings.Contains(why, "admitted in the month before") || strings.Contains(why, "reload") {
		t.Errorf("delivered after the month's end: %d %q", in, why)
	}
}

// The account id an operator needs for an upgrade is on the overview and the settings page, in
// a read-only field with a copy button (issue 32: nowhere in the dashboard).
func TestAccountIDShown(t *testing.T) {
	f := newFixture(t, nil)
	ann := f.browser(t)
	ann.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	usagetest.SetMonth(t, f.pool, acct, time.Now(), 12, 9)
	usagetest.SetDay(t, f.pool, acct, time.Now(), 9)
	for _, path := range []string{"/dashboard/", "/dashboard/settings"} {
		_, body := ann.get(path)
		if !strings.Contains(body, `<input id="account-id" type="text" readonly value="`+acct+`"`) ||
			!strings.Contains(body, `<button type="button" class="copy" data-copy="account-id">Copy</button>`) {
			t.Errorf("%s lacks the account id %s with its copy button", path, acct)
		}
	}
	_, body := ann.get("/dashboard/")
	if !strings.Contains(body, `id="chart-in-period">9<`) || !strings.Contains(body, `id="chart-calls-used">12<`) ||
		!strings.Contains(body, "the count above is 12") {
		t.Errorf("the overview does not reconcile 12 quota units with 9 billable on the chart:\n%s", body)
	}
}
