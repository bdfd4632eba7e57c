package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/problem"
)

// principalKey is where requireKey leaves the authenticated principal in the Echo context.
const principalKey = "mailvet.principal"

// principalOf returns who the request acts as. Only handlers behind requireKey (the /v1/email and
// /v1/management groups of routes.go) may call it.
func principalOf(c echo.Context) auth.Principal {
	p, ok := c.Get(principalKey).(auth.Principal)
	if !ok {
		// A programming error: a handler outside the authenticated groups asked for a principal.
		panic("api: principalOf called on a route without requireKey")
	}
	return p
}

// bearer extracts the token of an "Authorization: Bearer <token>" header. The scheme is
// case-insensitive (RFC 9110 §11.1).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// requireKey authenticates every request of a route family with a key of kind want (docs/api.md, "Authentication").
// Keys are looked up on every request, never cached, so a revocation through any replica is
// effective on the next request everywhere. Keys are never logged.
func (s *Server) requireKey(want auth.Kind) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if len(c.Request().Header.Values(echo.HeaderAuthorization)) > 1 {
				// Which one would count is a guess, and a proxy may have added one: refuse both.
				return Errorf(http.StatusUnauthorized, CodeInvalidAPIKey,
					"Send the key in exactly one header Authorization: Bearer <key>.",
					"The request has more than one Authorization header.")
			}
			raw, ok := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				return Errorf(http.StatusUnauthorized, CodeMissingAPIKey,
					"Send the key as the header Authorization: Bearer <key>.",
					"Missing API key: no Authorization header with a Bearer token.")
			}
			p, err := auth.Lookup(c.Request().Context(), s.pool, raw)
			if errors.Is(err, auth.ErrInvalidKey) {
				return err
			}
			if err != nil {
				e := Errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
					"Retry in a few seconds.", "The key could not be checked right now.")
				e.Header = http.Header{"Retry-After": {"2"}}
				s.log.Error("key look-up failed", "err", err)
				return e
			}
			if p.Kind != want {
				return wrongKeyType(want)
			}
			if p.Unconfirmed {
				// Such an account gets no keys (account.ErrEmailUnconfirmed); one that has a key
				// anyway still gets no verifications and no management until it is confirmed
				// (docs/dashboard.md, "Email confirmation").
				return Errorf(http.StatusForbidden, CodeEmailUnconfirmed, actionConfirmEmail, msgEmailUnconfirmed)
			}
			c.Set(principalKey, p)
			return next(c)
		}
	}
}

// The answer to an account whose email is not confirmed (email_unconfirmed, docs/errors.md).
const (
	msgEmailUnconfirmed = problem.MsgEmailUnconfirmed
	actionConfirmEmail  = problem.ActionConfirmEmail
)

func wrongKeyType(want auth.Kind) *Error {
	if want == auth.KindProvisioning {
		return Errorf(http.StatusForbidden, CodeWrongKeyType,
			"Create a provisioning key (sk_mgmt_…) in the dashboard, store it securely (it is shown once), and send it for /v1/management/* routes.",
			"The management API needs a provisioning key; a standard key was sent.")
	}
	return Errorf(http.StatusForbidden, CodeWrongKeyType,
		"Use a standard key (sk_live_…, or a sandbox key sk_test_…) for /v1/email/* routes; create one with POST /v1/management/keys or in the dashboard.",
		"The verify API needs a standard key; a provisioning key was sent.")
}
