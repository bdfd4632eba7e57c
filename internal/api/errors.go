package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verification"
	"github.com/mailvet/mailvet/internal/webhook"
)

// Error is the error envelope (docs/api.md, "Errors"). Handlers return it (or a domain error that errorTable maps
// to one); the single error handler below writes every error response of every route.
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

// Stable error codes (docs/errors.md).
const (
	CodeInvalidRequest     = "invalid_request"
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodePayloadTooLarge    = "payload_too_large"
	CodeRequestTimeout     = "request_timeout"
	CodeInternal           = "internal_error"
	CodeServiceUnavailable = "service_unavailable"

	CodeMissingAPIKey            = "missing_api_key"
	CodeInvalidAPIKey            = "invalid_api_key"
	CodeWrongKeyType             = "wrong_key_type"
	CodeEmailUnconfirmed         = "email_unconfirmed"
	CodeKeyNotFound              = "key_not_found"
	CodeKeyLimitReached          = "key_limit_reached"
	CodeDatastore                = "datastore_error"
	CodeCustomerNotFound         = "customer_not_found"
	CodeNoBillingCustomer        = "no_billing_customer"
	CodeBillingPortalUnavailable = "billing_portal_unavailable"
	CodeRateLimitExceeded        = "rate_limit_exceeded"
	CodeMonthlyQuotaExceeded     = "monthly_quota_exceeded"
	CodePaymentRequired          = "payment_required"
	CodeQuotaCheckFailed         = "quota_check_failed"

	// The delivery-log extension routes.
	CodePlanUpgradeRequired = "plan_upgrade_required"
	CodeDeliveryNotFound    = "delivery_not_found"
	CodeNotReplayable       = "delivery_not_replayable"

	// The bulk-list routes.
	CodeListNotFound = "list_not_found"
	CodeListFinished = "list_finished"

	// The Idempotency-Key header (docs/api.md, "Idempotency").
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeIdempotencyKeyInUse  = "idempotency_key_in_use"
)

// InvalidRequest is the 400 for bad input; the message must name the offending field.
func InvalidRequest(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidRequest,
		"Fix the request as the message says and send it again; see the API reference for the request shape.",
		format, args...)
}

// errorMapping turns a domain error (matched with errors.Is) into an envelope. Domain packages
// export sentinel errors; this table is the one place that gives them HTTP meaning.
type errorMapping struct {
	target  error
	status  int
	code    string
	action  string
	message string // empty: use err.Error()
}

// errorTable is searched in order; the first match wins.
var errorTable = []errorMapping{
	{auth.ErrInvalidKey, http.StatusUnauthorized, CodeInvalidAPIKey,
		"Check the key for typos and that it has not been revoked; send it as Authorization: Bearer <key>.",
		"The API key is not recognised (revoked, mistyped or from another environment)."},
	{account.ErrEmailUnconfirmed, http.StatusForbidden, CodeEmailUnconfirmed, actionConfirmEmail, msgEmailUnconfirmed},
	{account.ErrKeyNotFound, http.StatusNotFound, CodeKeyNotFound,
		"List the active keys with GET /v1/management/keys and use one of their ids.",
		"No active standard key with this id exists for the account."},
	{account.ErrKeyLimitReached, http.StatusTooManyRequests, CodeKeyLimitReached,
		"Revoke a key you no longer use with DELETE /v1/management/keys/{id}, or upgrade the plan.", ""},
	{account.ErrCustomerNotFound, http.StatusNotFound, CodeCustomerNotFound,
		"Check the Stripe customer id (cus_…) or create the account with it first.",
		"No account has this Stripe customer id."},
	{account.ErrNotFound, http.StatusNotFound, CodeNotFound,
		"Check the account id.", "Account not found."},
	{errNoBillingCustomer, http.StatusPaymentRequired, CodeNoBillingCustomer,
		"Subscribe to a paid plan first (or ask support to link your Stripe customer); the portal needs a billing customer.",
		"The account has no billing customer on file."},
	{billing.ErrProviderUnreachable, http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry in a few seconds; the billing provider could not be reached.",
		"The billing provider is unreachable."},
	// Before ErrPortalUnavailable, which it wraps: retrying can never help here.
	{billing.ErrNotConfigured, http.StatusInternalServerError, CodeBillingPortalUnavailable,
		"Do not retry: an operator of this deployment must set STRIPE_SECRET_KEY (and restart the API) before the billing portal can open.",
		"Billing is not configured on this deployment."},
	{billing.ErrPortalUnavailable, http.StatusInternalServerError, CodeBillingPortalUnavailable,
		"Retry later; if it persists, contact support with the X-Request-Id of the response.",
		"The billing provider did not return a portal URL."},
	{webhook.ErrInvalidFilter, http.StatusBadRequest, CodeInvalidRequest,
		"Use status pending, retrying, delivered or failed, limit 1–100, and the next_cursor of the previous page.", ""},
	{webhook.ErrDeliveryNotFound, http.StatusNotFound, CodeDeliveryNotFound,
		"List deliveries with GET /v1/management/deliveries and use one of their ids.",
		"No delivery with this id for the account."},
	{webhook.ErrNotReplayable, http.StatusConflict, CodeNotReplayable,
		"Only failed deliveries can be retried; check its state with GET /v1/management/deliveries.",
		"This delivery has not failed, so there is nothing to retry."},
	{list.ErrNotFound, http.StatusNotFound, CodeListNotFound,
		"List your lists with GET /v1/email/lists and use one of their ids; finished lists are deleted after their retention.",
		"No list with this id for the account."},
	{list.ErrFinished, http.StatusConflict, CodeListFinished,
		"Nothing to cancel: download its results, or delete it with DELETE /v1/email/lists/{id}.",
		"The list has already finished."},
	{idempotency.ErrInvalidKey, http.StatusBadRequest, CodeInvalidRequest,
		"Send one Idempotency-Key of 1 to 255 visible ASCII characters, such as a UUID made once per operation.",
		"Header Idempotency-Key must be sent once, as 1 to 255 visible ASCII characters (! to ~)."},
	{idempotency.ErrKeyReused, http.StatusConflict, CodeIdempotencyKeyReused,
		"Use a new Idempotency-Key for a new request; repeat a key only to retry the very same request (same body and parameters).",
		"This Idempotency-Key was used in the last 24 hours with another request (another body, route or parameters)."},
	{idempotency.ErrKeyInUse, http.StatusConflict, CodeIdempotencyKeyInUse,
		"Retry with the same key after the seconds in Retry-After: you will get the first request's response once it has finished.",
		"A request with this Idempotency-Key is still running."},
	{idempotency.ErrDatastore, http.StatusInternalServerError, CodeDatastore,
		"Retry later; if it persists, contact support with the X-Request-Id of the response.",
		"The datastore request failed."},
	{account.ErrDatastore, http.StatusInternalServerError, CodeDatastore,
		"Retry later; if it persists, contact support with the X-Request-Id of the response.",
		"The datastore request failed."},
}

// toEnvelope maps any error returned by a handler or middleware to the envelope.
func toEnvelope(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if e := verificationEnvelope(err); e != nil {
		return e
	}
	if e := admissionEnvelope(err); e != nil {
		return e
	}
	// Before the table: a datastore error whose cause is an unreachable or unanswering Postgres
	// is a 503 the client retries, not the 500 datastore_error of a failed statement.
	if (errors.Is(err, account.ErrDatastore) || errors.Is(err, idempotency.ErrDatastore)) && database.Unreachable(err) {
		return datastoreUnavailable()
	}
	for _, m := range errorTable {
		if errors.Is(err, m.target) {
			msg := m.message
			if msg == "" {
				msg = err.Error()
			}
			e := &Error{Status: m.status, Code: m.code, Action: m.action, Message: msg}
			if m.status == http.StatusServiceUnavailable {
				// A dependency outage the client waits out: when to retry, and the cause for the log.
				e.Header = http.Header{"Retry-After": {retryAfterSeconds}}
				e.cause = err
			}
			if m.code == CodeIdempotencyKeyInUse {
				// The first request is still running; a retry a second later may find it finished.
				e.Header = http.Header{"Retry-After": {"1"}}
			}
			return e
		}
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
func requestTimeout() *Error {
	e := Errorf(http.StatusRequestTimeout, CodeRequestTimeout,
		"Send the whole request body at once, right after the headers; if the network is slow, send smaller requests.",
		"The request body did not arrive in time.")
	e.Header = http.Header{"Connection": {"close"}}
	return e
}

func internalError() *Error {
	return Errorf(http.StatusInternalServerError, CodeInternal,
		"Retry later; if it persists, contact support with the X-Request-Id of the response.",
		"Internal server error.")
}

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
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(env.Status)
		return
	}
	if werr := c.JSON(env.Status, env); werr != nil {
		s.log.Warn("write error response", "err", werr)
	}
}

// verificationEnvelope maps the verification service's own errors: bad input is the 400, a
// dependency down or saturated the 503 of its cause.
func verificationEnvelope(err error) *Error {
	var (
		inv *verification.InvalidError
		un  *verification.UnavailableError
	)
	switch {
	case errors.As(err, &inv):
		return InvalidRequest("%s", inv.Message)
	case errors.As(err, &un):
		return unavailable(un.Cause)
	}
	return nil
}

// admissionEnvelope maps the refusals of verify admission (docs/errors.md), which carry extra fields.
func admissionEnvelope(err error) *Error {
	var (
		rl *usage.RateLimited
		qe *usage.QuotaExceeded
		sc *usage.SpendCapExceeded
	)
	switch {
	case errors.As(err, &rl):
		action := "Wait until reset_at (the Retry-After header gives the seconds), then retry; do not retry in a tight loop."
		if rl.Asked > rl.Limit {
			action = fmt.Sprintf("Split the request into requests of at most %d emails: this one asks for %d, more than a whole minute allows, and can never pass.", rl.Limit, rl.Asked)
		}
		msg := fmt.Sprintf("Rate limit of %d emails per minute exceeded for this account.", rl.Limit)
		if rl.Sandbox {
			msg = fmt.Sprintf("Sandbox rate limit of %d emails per minute exceeded for this account (sandbox keys have their own limit).", rl.Limit)
		}
		e := Errorf(http.StatusTooManyRequests, CodeRateLimitExceeded, action, "%s", msg)
		e.Extra = map[string]any{"limit": rl.Limit, "window": "1m", "reset_at": isoTime(rl.Reset)}
		if rl.Asked <= rl.Limit {
			// A request larger than a whole window gets no Retry-After: retrying it as it is
			// can never pass, and clients that honour the header would wait for nothing.
			e.Header = http.Header{"Retry-After": {strconv.Itoa(secondsUntil(rl.Reset, time.Now()))}}
		}
		return e
	case errors.As(err, &qe):
		msg := fmt.Sprintf("Monthly quota of %d verifications reached (%d used).", qe.Limit, qe.Used)
		action := "Wait until reset_at (the start of the next UTC month) or upgrade to a paid plan."
		if left := qe.Limit - qe.Used; left > 0 {
			// Not reached: this request is larger than what is left of it.
			msg = fmt.Sprintf("This request needs %d verifications; %d of the monthly quota of %d are left (%d used).", qe.Asked, left, qe.Limit, qe.Used)
			action = fmt.Sprintf("Send at most %d emails until reset_at (the start of the next UTC month), or upgrade to a paid plan.", left)
		}
		if qe.Asked > qe.Limit {
			msg = fmt.Sprintf("This request needs %d verifications, more than the whole monthly quota of %d.", qe.Asked, qe.Limit)
			action = fmt.Sprintf("Split the request into requests of at most %d emails, or upgrade to a paid plan: this one can never pass on this plan.", qe.Limit)
		}
		e := Errorf(http.StatusTooManyRequests, CodeMonthlyQuotaExceeded, action, "%s", msg)
		e.Extra = map[string]any{"limit": qe.Limit, "used": qe.Used, "reset_at": isoTime(qe.Reset)}
		if qe.Asked <= qe.Limit {
			e.Header = http.Header{"Retry-After": {strconv.Itoa(secondsUntil(qe.Reset, time.Now()))}}
		}
		return e
	case errors.As(err, &sc):
		// The numbers the customer needs to act without a second call (docs/errors.md,
		// "payment_required"): the cap, the overage so far, and the room the cap still leaves.
		cp := 0.0
		if sc.HardCapEUR != nil {
			cp = *sc.HardCapEUR
		}
		msg := fmt.Sprintf("This request of %d emails could take this month's overage past the hard spend cap of EUR %.2f (EUR %.2f so far); the cap leaves room for %d more emails.",
			sc.Asked, cp, sc.CurrentOverageEUR, sc.Room)
		action := "Raise or remove the hard spend cap in the billing settings, or wait until reset_at (the start of the next UTC month)."
		if sc.Room > 0 {
			action = fmt.Sprintf("Send at most %d emails until reset_at (the start of the next UTC month), or raise or remove the hard spend cap in the billing settings.", sc.Room)
		}
		e := Errorf(http.StatusPaymentRequired, CodePaymentRequired, action, "%s", msg)
		e.Extra = map[string]any{"hard_cap_eur": sc.HardCapEUR, "current_overage_eur": sc.CurrentOverageEUR,
			"room": sc.Room, "reset_at": isoTime(sc.Reset)}
		return e
	case errors.Is(err, usage.ErrQuotaCheck):
		e := Errorf(http.StatusServiceUnavailable, CodeQuotaCheckFailed,
			"Retry after the number of seconds in Retry-After; nothing was charged.",
			"The monthly quota could not be checked right now.")
		e.Header = http.Header{"Retry-After": {retryAfterSeconds}}
		return e
	case errors.Is(err, usage.ErrUnavailable):
		return unavailable(errUsageUnchecked)
	case errors.Is(err, queue.ErrNoWorkers), errors.Is(err, queue.ErrBusy), errors.Is(err, queue.ErrTimeout):
		return unavailable(err)
	}
	return nil
}

// unavailable is the 503 for a dependency that is down or saturated; the client retries. The
// message names the cause's class only (publicCauses): the error chain behind it (a broker's or
// decoder's text) goes to the log, not to the client.
func unavailable(err error) *Error {
	e := Errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry after the number of seconds in Retry-After; nothing was charged for this request.",
		"Verification is temporarily unavailable: %s.", publicCause(err))
	e.Header = http.Header{"Retry-After": {retryAfterSeconds}}
	if !slices.Contains(publicCauses, err) {
		e.cause = err
	}
	return e
}

var errUsageUnchecked = errors.New("usage limits could not be checked")

// publicCauses are the causes a 503's message names.
var publicCauses = []error{queue.ErrNoWorkers, queue.ErrBusy, queue.ErrTimeout, queue.ErrUnavailable,
	verification.ErrUnstored, errUsageUnchecked, verification.ErrShuttingDown, errSpool}

// publicCause is the text of the first public cause in err's chain.
func publicCause(err error) string {
	for _, c := range publicCauses {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "an internal service did not answer"
}

// datastoreUnavailable is the 503 of a route whose datastore did not answer in time (a partition,
// a restart, an overloaded Postgres): the request had no effect and can be retried.
func datastoreUnavailable() *Error {
	e := Errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry after the number of seconds in Retry-After; if it persists, contact support with the X-Request-Id of the response.",
		"The datastore could not be reached in time.")
	e.Header = http.Header{"Retry-After": {retryAfterSeconds}}
	return e
}

func (s *Server) docsURL(code string) string {
	return s.cfg.PublicURL + "/docs/errors#" + code
}
