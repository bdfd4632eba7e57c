package dashboard

import (
	"math"
	"net/http"
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
	if sum.CallsIncluded > 0 {
		d.Percent = math.Min(100, math.Round(float64(sum.CallsUsed)/float64(sum.CallsIncluded)*1000)/10)
	}
	h.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Session: s, Data: d, Notice: notice(r)})
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
