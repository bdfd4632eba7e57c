package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
)

// getUsage is GET /v1/management/usage: billable verifications per UTC day, last 30 days, zero
// days included (docs/api.md, "Metering").
func (s *Server) getUsage(c echo.Context) error {
	who := s.callerOf(c)
	days, err := usage.Daily(c.Request().Context(), s.pool, who.account, s.now())
	if err != nil {
		return datastoreError(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"days": days})
}

// getUsageSummary is GET /v1/management/usage/summary (docs/api.md, "Metering").
func (s *Server) getUsageSummary(c echo.Context) error {
	who := s.callerOf(c)
	sum, err := usage.Summarize(c.Request().Context(), s.pool, who.account, string(who.tier),
		who.tier == plan.Free, who.plan.MonthlyCalls, who.plan.OverageEUR, s.now())
	if err != nil {
		return datastoreError(err)
	}
	return c.JSON(http.StatusOK, summaryView{
		Period:    periodView{Start: isoTime(sum.Period.Start), End: isoTime(sum.Period.End)},
		CallsUsed: sum.CallsUsed, CallsIncluded: sum.CallsIncluded, CallsRemaining: sum.CallsRemaining,
		OverageCalls: sum.OverageCalls, EstimatedCostEUR: sum.EstimatedCostEUR, Tier: sum.Tier,
	})
}

type periodView struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// summaryView is the usage summary with ISO 8601 UTC timestamps to the second, like every other route.
type summaryView struct {
	Period           periodView `json:"period"`
	CallsUsed        int        `json:"calls_used"`
	CallsIncluded    int        `json:"calls_included"`
	CallsRemaining   int        `json:"calls_remaining"`
	OverageCalls     int        `json:"overage_calls"`
	EstimatedCostEUR float64    `json:"estimated_cost_eur"`
	Tier             string     `json:"tier"`
}
