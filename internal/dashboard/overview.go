package dashboard

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
)

// overviewData is the overview page: plan, this month's usage and the 30-day chart.
type overviewData struct {
	Account account.Account
	Status  string
	Limits  plan.Limits
	Free    bool
	Summary usage.Summary
	Percent float64 // of the included volume used, capped at 100 for the bar
	Chart   chart
	Period  string // the month, with its last day included (periodText)
	// InPeriod is the chart's billable verifications on the days of Period; Reconcile says in
	// words why the month's count above the chart may differ from it (issue 32: the two
	// numbers disagreed without a word). Empty when they agree.
	InPeriod  int
	Reconcile string
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s *session) {
	if s.Unconfirmed {
		h.confirmState(w, r, s, http.StatusOK, "")
		return
	}
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	limits := h.cfg.Plans.Of(a.Tier)
	free := a.Tier == plan.Free
	now := h.now()
	sum, err := usage.Summarize(ctx, h.pool, a.ID, string(a.Tier), free, limits.MonthlyCalls, limits.OverageEUR, now)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	days, err := usage.Daily(ctx, h.pool, a.ID, now)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := overviewData{Account: a, Status: subscriptionStatus(a), Limits: limits, Free: free, Summary: sum, Chart: newChart(days),
		Period: periodText(sum.Period.Start, sum.Period.End)}
	d.InPeriod, d.Reconcile = reconcile(sum, days, free)
	if sum.CallsIncluded > 0 {
		d.Percent = math.Min(100, math.Round(float64(sum.CallsUsed)/float64(sum.CallsIncluded)*1000)/10)
	}
	h.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Session: s, Data: d, Notice: notice(r)})
}

// reconcile sums the chart's days that fall in the summary's period and explains, when it is not
// the month's count, why (docs/dashboard.md, "What a customer can do"): on the free tier the
// count is of quota units, which also take addresses that failed the syntax check (not billable)
// and those still being verified; the chart counts billable verifications on the day they were
// delivered, the month in the month they were admitted; and the 30 days of the chart can start
// after the first of the month.
func reconcile(sum usage.Summary, days []usage.Day, free bool) (int, string) {
	in := 0
	first := sum.Period.Start.Format(time.DateOnly)
	covered := false
	for _, d := range days {
		if d.Date >= first && d.Date < sum.Period.End.Format(time.DateOnly) {
			in += d.Calls
		}
		covered = covered || d.Date == first
	}
	if in == sum.CallsUsed {
		return in, ""
	}
	var why []string
	if free {
		why = append(why, "the monthly quota counts every address checked, those that failed the syntax check (not billable) and those still being verified included")
	}
	if !covered && len(days) > 0 {
		why = append(why, "the chart's 30 days start after the first of the month")
	}
	if in > sum.CallsUsed {
		// A result is on the chart on the day it was delivered and counted in the month its
		// request was admitted (docs/api.md, "GET /v1/management/usage").
		why = append(why, "results of requests and lists admitted in the month before and delivered in this one are on this month's days of the chart, and counted in the month before")
	}
	if len(why) == 0 {
		// Otherwise paid tiers count the same billable verifications in both; the month's and
		// the day's counts are written in one transaction, so only a page read between two can
		// see this.
		why = append(why, "a verification finished while the page was being read; reload it")
	}
	return in, fmt.Sprintf("The chart's days in this month add up to %s billable verifications, the count above is %s: %s.",
		num(in), num(sum.CallsUsed), strings.Join(why, "; "))
}

// periodText shows a usage period by the days it includes: its end is exclusive, the first
// instant of the next month (docs/api.md, "GET /v1/management/usage/summary"), so "1 Nov – 1 Dec"
// would claim a day that is not in it. November 2026 reads "1 Nov – 30 Nov 2026".
func periodText(start, end time.Time) string {
	start, last := start.UTC(), end.UTC().Add(-time.Nanosecond)
	if start.Year() == last.Year() {
		return start.Format("2 Jan") + " – " + last.Format("2 Jan 2006")
	}
	return start.Format("2 Jan 2006") + " – " + last.Format("2 Jan 2006")
}

func subscriptionStatus(a account.Account) string {
	if a.SubscriptionStatus == nil {
		return "none"
	}
	return *a.SubscriptionStatus
}
