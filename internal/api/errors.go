package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/verification"
)

// Error is the error envelope (docs/api.md, "Errors"). Handlers return it (or a domain error that
// the one mapping, internal/problem, maps to one); the single error handler below writes every
// error response of every route.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
	Action  string `json:"action"`
	Docs    string `json:"docs"`
	// Extra holds the additional fields some errors carry (limit, used, reset_at, …).
	Extra map[string]any `json:"-"`
	// Header is set on the response alongside the body (Retry-After, …).
	Header http.Header `json:"-"`
	// cause is the internal failure behind a 503, for the log only (unavailable).
	cause error
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// MarshalJSON flattens Extra into the envelope, as docs/errors.md shows the extra fields beside error.
func (e *Error) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, 4+len(e.Extra))
	for k, v := range e.Extra {
		m[k] = v
	}
	m["error"], m["message"], m["action"], m["docs"] = e.Code, e.Message, e.Action, e.Docs
	return json.Marshal(m)
}

// Errorf builds an envelope error; docs is filled in by the error handler.
func Errorf(status int, code, action, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Action: action, Message: fmt.Sprintf(format, args...)}
}

// Stable error codes (docs/errors.md): the one mapping's (internal/problem).
const (
	CodeInvalidRequest     = problem.CodeInvalidRequest
	CodeNotFound           = problem.CodeNotFound
	CodeMethodNotAllowed   = problem.CodeMethodNotAllowed
	CodePayloadTooLarge    = problem.CodePayloadTooLarge
	CodeRequestTimeout     = problem.CodeRequestTimeout
	CodeInternal           = problem.CodeInternal
	CodeServiceUnavailable = problem.CodeServiceUnavailable

	CodeMissingAPIKey            = problem.CodeMissingAPIKey
	CodeInvalidAPIKey            = problem.CodeInvalidAPIKey
	CodeWrongKeyType             = problem.CodeWrongKeyType
	CodeEmailUnconfirmed         = problem.CodeEmailUnconfirmed
	CodeKeyNotFound              = problem.CodeKeyNotFound
	CodeKeyLimitReached          = problem.CodeKeyLimitReached
	CodeDatastore                = problem.CodeDatastore
	CodeCustomerNotFound         = problem.CodeCustomerNotFound
	CodeNoBillingCustomer        = problem.CodeNoBillingCustomer
	CodeBillingPortalUnavailable = problem.CodeBillingPortalUnavailable
	CodeRateLimitExceeded        = problem.CodeRateLimitExceeded
	CodeMonthlyQuotaExceeded     = problem.CodeMonthlyQuotaExceeded
	CodePaymentRequired          = problem.CodePaymentRequired
	CodeQuotaCheckFailed         = problem.CodeQuotaCheckFailed
	CodePlanUpgradeRequired      = problem.CodePlanUpgradeRequired
	CodeDeliveryNotFound         = problem.CodeDeliveryNotFound
	CodeNotReplayable            = problem.CodeNotReplayable
	CodeListNotFound             = problem.CodeListNotFound
	CodeListFinished             = problem.CodeListFinished
	CodeIdempotencyKeyReused     = problem.CodeIdempotencyKeyReused
	CodeIdempotencyKeyInUse      = problem.CodeIdempotencyKeyInUse
)

// InvalidRequest is the 400 for bad input; the message must name the offending field.
func InvalidRequest(format string, args ...any) *Error {
	return fromProblem(problem.Invalid(format, args...))
}

// fromProblem is the envelope of a problem of the one mapping (internal/problem).
func fromProblem(p *problem.Problem) *Error {
	if p == nil {
		return nil
	}
	return &Error{Status: p.Status, Code: p.Code, Message: p.Message, Action: p.Action, Extra: p.Extra, Header: p.Header, cause: p.Cause}
}

// toEnvelope maps any error returned by a handler or middleware to the envelope: the API's own
// envelopes as they are, the domain errors by the one mapping (internal/problem), and what Echo
// raises itself.
func toEnvelope(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if p := problem.Of(err); p != nil {
		return fromProblem(p)
	}
	if errors.Is(err, errNoBillingCustomer) {
		return Errorf(http.StatusPaymentRequired, CodeNoBillingCustomer,
			"Subscribe to a paid plan first (or ask support to link your Stripe customer); the portal needs a billing customer.",
			"The account has no billing customer on file.")
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return fromEcho(he)
	}
	return nil
}

// fromEcho covers the errors Echo raises itself (no route, wrong method, body too large, …).
func fromEcho(he *echo.HTTPError) *Error {
	switch he.Code {
	case http.StatusNotFound:
		return Errorf(http.StatusNotFound, CodeNotFound,
			"Check the method and path against the API reference at /openapi.json.", "No such route.")
	case http.StatusMethodNotAllowed:
		return Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			"Use one of the methods the API reference lists for this path.", "Method not allowed on this route.")
	case http.StatusRequestEntityTooLarge:
		return payloadTooLarge()
	case http.StatusUnsupportedMediaType:
		return InvalidRequest("Content-Type must be application/json.")
	}
	if he.Code >= 400 && he.Code < 500 {
		return InvalidRequest("%v", he.Message)
	}
	return nil
}

func payloadTooLarge() *Error {
	return Errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		"Send at most 2 MB per request; split large lists into several batch requests.",
		"Request body exceeds 2 MB.")
}

// requestTimeout is the 408 for a body that did not arrive within the body read deadline
// (bodyDeadline). The connection is closed after it: the rest of the body may still be on its
// way, and it must not be read as the next request.
func requestTimeout() *Error { return fromProblem(problem.RequestTimeout()) }

func internalError() *Error { return fromProblem(problem.Internal()) }

// handleError is Echo's HTTPErrorHandler: every error of every route goes through here.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	env := toEnvelope(err)
	var (
		direct  *Error
		refusal *verification.UnavailableError
	)
	if env != nil && env.Status >= 500 && env.cause == nil && !errors.As(err, &direct) && !errors.As(err, &refusal) {
		// A mapped server-side failure (datastore, billing provider): the client sees the envelope,
		// the log keeps the cause. The verification service's refusals for a public cause (no
		// worker, the broker down) are the client's to wait out, as the envelopes built here are.
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(),
			"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "code", env.Code, "err", err)
	}
	if env == nil {
		// An unexpected error: log it in full, show the client nothing of the internals.
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(),
			"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", err)
		env = internalError()
	}
	if env.cause != nil {
		s.log.Warn("request refused: dependency unavailable", "method", c.Request().Method, "path", c.Path(),
			"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", env.cause)
	}
	if env.Docs == "" {
		env.Docs = s.docsURL(env.Code)
	}
	for k, vs := range env.Header {
		for _, v := range vs {
			c.Response().Header().Add(k, v)
		}
	}
	// A HEAD gets the envelope as its GET would: the HTTP server drops the body of an answer to a
	// HEAD, and keeps its Content-Type and Content-Length (docs/errors.md).
	if werr := c.JSON(env.Status, env); werr != nil {
		s.log.Warn("write error response", "err", redact.Peer(werr))
	}
}

// unavailable is the 503 for a dependency that is down or saturated (problem.Unavailable).
func unavailable(err error) *Error { return fromProblem(problem.Unavailable(err)) }

// publicCause is the text a 503's message gives for err (problem.PublicCause).
func publicCause(err error) string { return problem.PublicCause(err) }

// datastoreUnavailable is the 503 of a route whose datastore did not answer in time.
func datastoreUnavailable() *Error { return fromProblem(problem.DatastoreUnavailable()) }

func (s *Server) docsURL(code string) string {
	return s.cfg.PublicURL + "/docs/errors#" + code
}
