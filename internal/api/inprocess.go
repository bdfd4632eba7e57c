package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/mailvet/mailvet/internal/auth"
)

// inProcessPrincipal is the context key of ServeAs's principal.
type inProcessPrincipal struct{}

// ServeAs answers r, a request for a /v1/email/ route, as if it came with principal p's key.
// The dashboard (docs/dashboard.md) calls it for the playground and the list pages with a standard
// key the signed-in customer picked: raw keys are never stored, so it cannot send them over HTTP,
// and going through the API's own routes and middleware keeps admission, rate limits, quota,
// metering, limits and error messages exactly the API's. Only the key look-up is skipped.
func (s *Server) ServeAs(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if !strings.HasPrefix(r.URL.Path, "/v1/email/") {
		http.Error(w, "ServeAs serves the verify API only", http.StatusInternalServerError)
		return
	}
	s.echo.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), inProcessPrincipal{}, p)))
}
