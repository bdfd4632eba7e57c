package api

import (
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/dashboard"
	"github.com/mailvet/mailvet/internal/usage"
)

// loggedRejections are the verify-route refusals that get a usage-log row (docs/errors.md,
// "Summary", its "logged" column), with the error_class they are logged under (rule 3).
var loggedRejections = map[string]string{
	CodeInvalidRequest:       "invalid_request",
	CodeQuotaCheckFailed:     "quota_check_failed",
	CodeMonthlyQuotaExceeded: "monthly_quota_exceeded",
	CodeRateLimitExceeded:    "rate_limit",
	CodePaymentRequired:      "payment_required",
	CodeServiceUnavailable:   "service_unavailable",
}

// logRejections records the refusals of the verify routes in the usage log (docs/api.md,
// "Metering"); such rows never count toward the quota or billing. It is the verify group's
// middleware, after authentication so that the row names the account; the error handler only
// writes responses. Rows are queued for usage.Rejections and written behind the response: when the
// datastore is what failed, writing one here would delay the error response by another datastore
// timeout. Best effort: the writer drops (and logs and counts) rows it cannot write.
func (s *Server) logRejections(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil {
			return nil
		}
		env := toEnvelope(err)
		if env == nil {
			return err
		}
		if p, authenticated := c.Get(principalKey).(auth.Principal); authenticated {
			s.refused(p.AccountID, p.KeyID, verifyRoutes[c.Path()], env.Code, usageKey(c), p.Sandbox())
		}
		return err
	}
}

// refused meters one refusal of an authenticated request: the admission refusal counter, and for
// a verify request (route its usage log name, "" for another) the rejection row of the usage log.
func (s *Server) refused(account, key, route, code, itemKey string, sandbox bool) {
	if admissionRefusal[code] {
		s.refusals.WithLabelValues(code).Inc()
	}
	// A sandbox key's refusals leave no usage row: a sandbox key never writes to the usage log
	// (docs/sandbox.md).
	if class, logged := loggedRejections[code]; logged && route != "" && !sandbox {
		s.rejections.Add(usage.Row{
			ItemKey: itemKey + ":rejected", AccountID: account, KeyID: key, OccurredAt: time.Now(),
			Route: route, FailedCheck: code, ErrorClass: class,
		})
	}
}

// dashboardRefused meters a refusal of a request the dashboard made for a customer (its
// playground, its list pages) as the API's own request would have been (docs/api.md, "Metering").
func (s *Server) dashboardRefused(r dashboard.Refusal) {
	s.refused(r.AccountID, r.KeyID, r.Route, r.Code, r.ItemKey, r.Sandbox)
}

// verifyRoutes are the routes whose refusals get a usage-log row (docs/errors.md, "Summary", its
// "logged" column), with the usage log's name of each, as the handlers log successful rows.
// The list and job routes' refusals are not logged: their usage rows are the list's and the
// job's own.
var verifyRoutes = map[string]string{
	"/v1/email/verify":        "verify",
	"/v1/email/verify/batch":  "verify_batch",
	"/v1/email/verify/stream": "verify_stream",
}
