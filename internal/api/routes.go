package api

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/auth"
)

// routes registers every route of the API. Keep this the one list of paths: it is what
// /openapi.json must describe (TestOpenAPICoversEveryRoute checks it).
// dashboardRoute is the one route of the dashboard's pages (routeOf names each page).
const dashboardRoute = "/dashboard*"

func (s *Server) routes() {
	e := s.echo
	get(e, "/", s.root)
	get(e, "/healthz", s.healthz)
	get(e, "/readyz", s.readyz)
	get(e, "/openapi.json", s.openapi)
	get(e, "/docs/errors", s.errorDocs)
	e.POST("/v1/stripe/webhook", s.stripeWebhook)
	// The customer dashboard's HTML pages (docs/dashboard.md): one wildcard handed to package
	// dashboard, which routes its own pages; they are not JSON API routes, so not in /openapi.json.
	e.Any(dashboardRoute, echo.WrapHandler(s.dashboard))

	// The verify API: every route added to s.email needs a standard key (sk_live_…); handlers read
	// the caller with principalOf(c). Unknown paths under /v1/email authenticate first, then 404.
	s.email = e.Group("/v1/email", s.requireKey(auth.KindStandard), s.logRejections)
	s.email.POST("/verify", s.verifyOne, s.rateLimitHeaders, s.idempotent())
	s.email.POST("/verify/batch", s.verifyBatch, s.rateLimitHeaders, s.idempotent())
	s.email.POST("/verify/stream", s.verifyStream, s.rateLimitHeaders)
	get(s.email, "/jobs/:job_id", s.getJob)
	s.email.POST("/lists", s.uploadList, s.idempotentUpload())
	get(s.email, "/lists", s.listLists)
	get(s.email, "/lists/:id", s.getList)
	get(s.email, "/lists/:id/results", s.listResults)
	s.email.POST("/lists/:id/cancel", s.cancelList)
	s.email.DELETE("/lists/:id", s.deleteList)
	s.email.DELETE("/history", s.deleteHistory)
	s.email.RouteNotFound("", s.notFoundInGroup)
	s.email.RouteNotFound("/*", s.notFoundInGroup)

	// The management API: provisioning keys (sk_mgmt_…) only.
	s.mgmt = e.Group("/v1/management", s.requireKey(auth.KindProvisioning))
	s.mgmt.RouteNotFound("", s.notFoundInGroup)
	s.mgmt.RouteNotFound("/*", s.notFoundInGroup)
	get(s.mgmt, "/account", s.getAccount)
	s.mgmt.DELETE("/account", s.deleteAccount)
	get(s.mgmt, "/account/export", s.exportAccount)
	get(s.mgmt, "/keys", s.listKeys)
	s.mgmt.POST("/keys", s.createKey, s.idempotent())
	s.mgmt.DELETE("/keys/:id", s.deleteKey)
	s.mgmt.POST("/billing/portal", s.billingPortal, s.idempotent())
	get(s.mgmt, "/usage", s.getUsage)
	get(s.mgmt, "/usage/summary", s.getUsageSummary)
	get(s.mgmt, "/deliveries", s.listDeliveries)
	s.mgmt.POST("/deliveries/:id/retry", s.retryDelivery)
	get(s.mgmt, "/audit", s.listAudit)
}

// get registers a read route for GET and HEAD. A HEAD is the same request as its GET (the same
// key check, errors, status and headers) whose body the HTTP server drops (docs/api.md,
// "Conventions"); no read route bills, meters or changes anything, so the two cost the same.
func get(r interface {
	Match([]string, string, echo.HandlerFunc, ...echo.MiddlewareFunc) []*echo.Route
}, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	r.Match([]string{http.MethodGet, http.MethodHead}, path, h, m...)
}

// notFoundInGroup answers paths under an authenticated group that no route matches, after the
// group's authentication ran. Echo's group catch-all would also swallow a known path called with
// the wrong method, so the other methods are tried here to answer 405 with Allow instead of 404.
func (s *Server) notFoundInGroup(c echo.Context) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == c.Request().Method {
			continue
		}
		// The path as Echo routed it: the raw one when it has escapes of its own, so that
		// /v1/email/lists%2f{id}, which matched no route, is not found under another method
		// once decoded (an Allow without the method the real path takes).
		probe := s.echo.NewContext(c.Request(), nil)
		s.echo.Router().Find(m, echo.GetPath(c.Request()), probe)
		if p := probe.Path(); p != "" && !strings.HasSuffix(p, "/*") && p != c.Path() {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return echo.ErrNotFound
	}
	c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
	return echo.ErrMethodNotAllowed
}

// methodNotAllowed makes the routes outside the /v1 groups (health, the document, the error
// docs, the Stripe webhook) answer a method they do not list as every /v1 path does: 405
// method_not_allowed in the envelope, with an Allow header naming only the methods
// /openapi.json documents. Echo itself answers OPTIONS there with a bare 204, and lists OPTIONS
// in Allow; neither is in the contract. The dashboard takes every method and is left alone.
func methodNotAllowed(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		allow, ok := c.Get(echo.ContextKeyHeaderAllow).(string)
		if !ok || allow == "" {
			return next(c) // the route exists for this method, or the path for none
		}
		var methods []string
		for _, m := range strings.Split(allow, ",") {
			if m = strings.TrimSpace(m); m != http.MethodOptions {
				methods = append(methods, m)
			}
		}
		c.Response().Header().Set(echo.HeaderAllow, strings.Join(methods, ", "))
		return echo.ErrMethodNotAllowed
	}
}
