package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
)

// accountJSON is the account of docs/api.md, "GET /v1/management/account".
type accountJSON struct {
	AccountID          string      `json:"account_id"`
	Tier               plan.Tier   `json:"tier"`
	SubscriptionStatus string      `json:"subscription_status"`
	CurrentPeriodEnd   *string     `json:"current_period_end"`
	CancelAtPeriodEnd  bool        `json:"cancel_at_period_end"`
	CanceledAt         *string     `json:"canceled_at"`
	CancelAt           *string     `json:"cancel_at"`
	TrialStart         *string     `json:"trial_start"`
	TrialEnd           *string     `json:"trial_end"`
	BillingCycleAnchor *string     `json:"billing_cycle_anchor"`
	Limits             plan.Limits `json:"limits"`
	UsageThisMonth     int         `json:"usage_this_month"`
}

// NoSubscription is subscription_status for an account that never had a Stripe subscription; the
// spec types the field as a string, so it is never null.
const NoSubscription = "none"

// isoTime formats t as ISO 8601 UTC with second precision (2026-11-22T03:04:05Z), the one
// timestamp format of every response.
func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func isoTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := isoTime(*t)
	return &s
}

func (s *Server) getAccount(c echo.Context) error {
	ctx := c.Request().Context()
	p := principalOf(c)
	a, err := s.accounts.Get(ctx, p.AccountID)
	if err != nil {
		return err
	}
	limits := s.cfg.Plans.Of(a.Tier)
	// The same count as the usage summary's calls_used, on every tier (usage.Used).
	used, err := usage.MonthUsed(ctx, s.pool, a.ID, a.Tier == plan.Free, s.now())
	if err != nil {
		return datastoreError(err)
	}
	status := NoSubscription
	if a.SubscriptionStatus != nil {
		status = *a.SubscriptionStatus
	}
	return c.JSON(http.StatusOK, accountJSON{
		AccountID: a.ID, Tier: a.Tier, SubscriptionStatus: status,
		CurrentPeriodEnd: isoTimePtr(a.CurrentPeriodEnd), CancelAtPeriodEnd: a.CancelAtPeriodEnd,
		CanceledAt: isoTimePtr(a.CanceledAt), CancelAt: isoTimePtr(a.CancelAt),
		TrialStart: isoTimePtr(a.TrialStart), TrialEnd: isoTimePtr(a.TrialEnd),
		BillingCycleAnchor: isoTimePtr(a.BillingCycleAnchor),
		Limits:             limits, UsageThisMonth: used,
	})
}
