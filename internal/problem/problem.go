// Package problem is the one mapping of the service's typed domain errors to what a client is told
// (docs/errors.md): a status, a stable code, a message about the request, an action, the extra
// fields some refusals carry and the headers that go with them. The API writes a Problem as its
// JSON error envelope (internal/api, errors.go); the dashboard shows its message with advice of
// its own (internal/dashboard). Neither parses the other's output: both call Of.
package problem

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

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

// Problem is what a refused or failed request is told (docs/errors.md): the fields of the API's
// error envelope but its docs link, which is the API's to build.
type Problem struct {
	Status  int
	Code    string
	Message string
	Action  string
	// Extra holds the additional fields some errors carry (limit, used, reset_at, line, …).
	Extra map[string]any
	// Header goes on the response alongside the body (Retry-After, Connection, …).
	Header http.Header
	// Cause is the internal failure behind a 503, for the log only; nil when the message already
	// names it.
	Cause error
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Message) }

// New builds a problem.
func New(status int, code, action, format string, args ...any) *Problem {
	return &Problem{Status: status, Code: code, Action: action, Message: fmt.Sprintf(format, args...)}
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
	CodeKeyNotFound              = "key_not_found"
	CodeKeyLimitReached          = "key_limit_reached"
	CodeDatastore                = "datastore_error"
	CodeCustomerNotFound         = "customer_not_found"
	CodeNoBillingCustomer        = "no_billing_customer"
	CodeBillingPortalUnavailable = "billing_portal_unavailable"
	CodeRateLimitExceeded        = "rate_limit_exceeded"
	CodeMonthlyQuotaExceeded     = "monthly_quota_exceeded"
	CodePaymentRequired          = "payment_required"
	CodeEmailUnconfirmed         = "email_unconfirmed"
	CodeQuotaCheckFailed         = "quota_check_failed"
	// The delivery-log extension routes.
	CodePlanUpgradeRequired = "plan_upgrade_required"
	CodeDeliveryNotFound    = "delivery_not_found"
	CodeNotReplayable       = "delivery_not_replayable"
	// The bulk lists.
	CodeListNotFound = "list_not_found"
	CodeListFinished = "list_finished"
	// The Idempotency-Key header (docs/api.md, "Idempotency").
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeIdempotencyKeyInUse  = "idempotency_key_in_use"
)

// RetryAfterSeconds is the Retry-After of a dependency outage the client waits out.
const RetryAfterSeconds = "2"

// actionRetryLater is the action of a failure on the service's side that a retry may get past
// (an internal error, a failed datastore statement, a portal the provider did not give): the
// request id lets support find the failure in the log. Several problems give it, in the same words.
const actionRetryLater = "Retry later; if it persists, contact support with the X-Request-Id of the response."

// retryAfter sets the Retry-After header of p's response to seconds, keeping any other header p
// has: every refusal a client may retry says when in the same way.
func retryAfter(p *Problem, seconds string) *Problem {
	if p.Header == nil {
		p.Header = http.Header{}
	}
	p.Header.Set("Retry-After", seconds)
	return p
}

// closesConnection has p's response close the connection, keeping any other header p has: after
// a refused or late upload the rest of the body may still be on its way, and it must not be read
// as the next request.
func closesConnection(p *Problem) *Problem {
	if p.Header == nil {
		p.Header = http.Header{}
	}
	p.Header.Set("Connection", "close")
	return p
}

// Invalid is the 400 for bad input; the message must name the offending field.
func Invalid(format string, args ...any) *Problem {
	return New(http.StatusBadRequest, CodeInvalidRequest,
		"Fix the request as the message says and send it again; see the API reference for the request shape.",
		format, args...)
}

// The email_unconfirmed problem's words (docs/errors.md, "email_unconfirmed"): the API's
// authentication and the table below give the same.
const (
	MsgEmailUnconfirmed = "The account's email is not confirmed yet."
	ActionConfirmEmail  = "Open the confirmation link mailed to the account's email, or sign in to the dashboard to send it again."
)

// mapping turns a domain error (matched with errors.Is) into a problem. Domain packages export
// sentinel errors; this table is the one place that gives them a status and words.
type mapping struct {
	target  error
	status  int
	code    string
	action  string
	message string // empty: use err.Error()
}

// table is searched in order; the first match wins.
var table = []mapping{
	{auth.ErrInvalidKey, http.StatusUnauthorized, CodeInvalidAPIKey,
		"Check the key for typos and that it has not been revoked; send it as Authorization: Bearer <key>.",
		"The API key is not recognised (revoked, mistyped or from another environment)."},
	{account.ErrEmailUnconfirmed, http.StatusForbidden, CodeEmailUnconfirmed, ActionConfirmEmail, MsgEmailUnconfirmed},
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
	{billing.ErrProviderUnreachable, http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry in a few seconds; the billing provider could not be reached.",
		"The billing provider is unreachable."},
	// Before ErrPortalUnavailable, which it wraps: retrying can never help here.
	{billing.ErrNotConfigured, http.StatusInternalServerError, CodeBillingPortalUnavailable,
		"Do not retry: an operator of this deployment must set STRIPE_SECRET_KEY (and restart the API) before the billing portal can open.",
		"Billing is not configured on this deployment."},
	{billing.ErrPortalUnavailable, http.StatusInternalServerError, CodeBillingPortalUnavailable,
		actionRetryLater,
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
		actionRetryLater,
		"The datastore request failed."},
	{account.ErrDatastore, http.StatusInternalServerError, CodeDatastore,
		actionRetryLater,
		"The datastore request failed."},
}

// Of maps a domain error to its problem, or returns nil for an error it does not know (which
// the caller shows as Internal, logging it in full).
func Of(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	// A row a request writes names its key and account. When the account is deleted while the
	// request runs (docs/personal-data.md), the key was good when the request began and is gone
	// when the row is written: the answer is the revoked key's 401, not a 500 or a
	// 503 that a retry cannot mend.
	if database.ReferenceGone(err, "key_id") || database.ReferenceGone(err, "account_id") {
		return Of(auth.ErrInvalidKey)
	}
	if p := ofVerification(err); p != nil {
		return p
	}
	if p := Admission(err); p != nil {
		return p
	}
	// Before the table: a datastore error whose cause is an unreachable or unanswering Postgres
	// is a 503 the client retries, not the 500 datastore_error of a failed statement.
	if (errors.Is(err, account.ErrDatastore) || errors.Is(err, idempotency.ErrDatastore)) && database.Unreachable(err) {
		return DatastoreUnavailable()
	}
	for _, m := range table {
		if errors.Is(err, m.target) {
			msg := m.message
			if msg == "" {
				msg = err.Error()
			}
			p := &Problem{Status: m.status, Code: m.code, Action: m.action, Message: msg}
			if m.status == http.StatusServiceUnavailable {
				// A dependency outage the client waits out: when to retry, and the cause for the log.
				retryAfter(p, RetryAfterSeconds)
				p.Cause = err
			}
			if m.code == CodeIdempotencyKeyInUse {
				// The first request is still running; a retry a second later may find it finished.
				retryAfter(p, "1")
			}
			return p
		}
	}
	return nil
}

// OfList is Of for the errors of the list store (list.Store, and the verification service's list
// calls): a Postgres that did not answer is the 503 the client retries, not a 500.
func OfList(err error) *Problem {
	if ListStoreUnreachable(err) {
		return DatastoreUnavailable()
	}
	return Of(err)
}

// ListStoreUnreachable reports whether err, of the list store, is a Postgres that did not answer
// rather than a refusal of the list's own.
func ListStoreUnreachable(err error) bool {
	return err != nil && !errors.Is(err, list.ErrNotFound) && !errors.Is(err, list.ErrFinished) && database.Unreachable(err)
}

// ofVerification maps the verification service's own errors: bad input is the 400, a dependency
// down or saturated the 503 of its cause.
func ofVerification(err error) *Problem {
	var (
		inv *verification.InvalidError
		un  *verification.UnavailableError
	)
	switch {
	case errors.As(err, &inv):
		return Invalid("%s", inv.Message)
	case errors.As(err, &un):
		return Unavailable(un.Cause)
	}
	return nil
}

// Upload maps what can go wrong while receiving and storing an uploaded list, or returns nil for
// an error that is not the upload's own (admission's, the store's: Of and OfList map those). The
// connection is closed after such a refusal: the rest of the file may still be on its way.
func Upload(err error) *Problem {
	var (
		in    *list.InputError
		many  *list.TooManyRowsError
		big   *http.MaxBytesError
		busy  *verification.UploadBusyError
		large *verification.FileTooLargeError
	)
	var p *Problem
	switch {
	case errors.As(err, &busy):
		// Nothing was read or stored, and the same upload can be sent again once one of those on
		// their way has been received.
		p = New(http.StatusServiceUnavailable, CodeServiceUnavailable,
			"Retry after the number of seconds in Retry-After, or once an upload on its way has been answered; nothing was stored or charged.",
			"The upload was not received: %v.", busy.Reason)
		retryAfter(p, RetryAfterSeconds)
	case errors.As(err, &large) && large.Size > 0:
		p = ListTooLarge("The file is %d bytes; the limit is %d bytes.", large.Size, large.Limit)
	case errors.As(err, &large):
		p = ListTooLarge("The file is larger than %d bytes; split it into several lists.", large.Limit)
	case errors.As(err, &in):
		p = Invalid("The file cannot be read: %s. Nothing was stored or charged.", in.Error())
		if in.Line > 0 {
			p.Extra = map[string]any{"line": in.Line}
		}
	case errors.As(err, &many):
		p = ListTooLarge("The file has more than %d rows; split it into several lists.", many.Limit)
	case errors.As(err, &big):
		p = ListTooLarge("The file is larger than %d bytes; split it into several lists.", big.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		p = RequestTimeout()
	case errors.Is(err, verification.ErrSpool):
		return Unavailable(err)
	case errors.Is(err, verification.ErrUploadRead):
		p = Invalid("The upload's body could not be read (%s). Nothing was stored or charged.", verification.ReadProblem(err))
	default:
		return nil
	}
	return closesConnection(p)
}

// ListTooLarge is the 413 of an upload over the list limits. It closes the connection, as the
// rest of the file may still be on its way.
func ListTooLarge(format string, args ...any) *Problem {
	return closesConnection(New(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		"Split the file into several lists within the limits; nothing was stored or charged.", format, args...))
}

// RequestTimeout is the 408 for a body that did not arrive in time. The connection is closed
// after it: the rest of the body may still be on its way, and it must not be read as the next
// request.
func RequestTimeout() *Problem {
	return closesConnection(New(http.StatusRequestTimeout, CodeRequestTimeout,
		"Send the whole request body at once, right after the headers; if the network is slow, send smaller requests.",
		"The request body did not arrive in time."))
}

// Internal is the 500 of an unexpected failure: the client is told nothing of its internals.
func Internal() *Problem {
	return New(http.StatusInternalServerError, CodeInternal,
		actionRetryLater,
		"Internal server error.")
}

// Admission maps the refusals of admission (docs/errors.md), which carry extra fields, or
// returns nil for another error.
func Admission(err error) *Problem {
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
		p := New(http.StatusTooManyRequests, CodeRateLimitExceeded, action, "%s", msg)
		p.Extra = map[string]any{"limit": rl.Limit, "window": "1m", "reset_at": isoTime(rl.Reset)}
		if rl.Asked <= rl.Limit {
			// A request larger than a whole window gets no Retry-After: retrying it as it is
			// can never pass, and clients that honour the header would wait for nothing.
			retryAfter(p, strconv.Itoa(SecondsUntil(rl.Reset, decidedAt(rl.At))))
		}
		return p
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
		p := New(http.StatusTooManyRequests, CodeMonthlyQuotaExceeded, action, "%s", msg)
		p.Extra = map[string]any{"limit": qe.Limit, "used": qe.Used, "reset_at": isoTime(qe.Reset)}
		if qe.Asked <= qe.Limit {
			retryAfter(p, strconv.Itoa(SecondsUntil(qe.Reset, decidedAt(qe.At))))
		}
		return p
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
		p := New(http.StatusPaymentRequired, CodePaymentRequired, action, "%s", msg)
		p.Extra = map[string]any{"hard_cap_eur": sc.HardCapEUR, "current_overage_eur": sc.CurrentOverageEUR,
			"room": sc.Room, "reset_at": isoTime(sc.Reset)}
		return p
	case errors.Is(err, usage.ErrQuotaCheck):
		return retryAfter(New(http.StatusServiceUnavailable, CodeQuotaCheckFailed,
			"Retry after the number of seconds in Retry-After; nothing was charged.",
			"The monthly quota could not be checked right now."), RetryAfterSeconds)
	case errors.Is(err, usage.ErrUnavailable):
		return Unavailable(errUsageUnchecked)
	case errors.Is(err, queue.ErrNoWorkers), errors.Is(err, queue.ErrBusy), errors.Is(err, queue.ErrTimeout):
		return Unavailable(err)
	}
	return nil
}

// Unavailable is the 503 for a dependency that is down or saturated; the client retries. The
// message names the cause's class only (publicCauses): the error chain behind it (a broker's or
// decoder's text) goes to the log, not to the client.
func Unavailable(err error) *Problem {
	p := New(http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry after the number of seconds in Retry-After; nothing was charged for this request.",
		"Verification is temporarily unavailable: %s.", PublicCause(err))
	retryAfter(p, RetryAfterSeconds)
	if !slices.Contains(publicCauses, err) {
		p.Cause = err
	}
	return p
}

var errUsageUnchecked = errors.New("usage limits could not be checked")

// publicCauses are the causes a 503's message names.
var publicCauses = []error{queue.ErrNoWorkers, queue.ErrBusy, queue.ErrTimeout, queue.ErrUnavailable,
	verification.ErrUnstored, errUsageUnchecked, verification.ErrShuttingDown, verification.ErrSpool}

// PublicCause is the text of the first public cause in err's chain: what a 503's message, or a
// stream's error line, says of why.
func PublicCause(err error) string {
	for _, c := range publicCauses {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return "an internal service did not answer"
}

// DatastoreUnavailable is the 503 of a request whose datastore did not answer in time (a
// partition, a restart, an overloaded Postgres): the request had no effect and can be retried.
func DatastoreUnavailable() *Problem {
	return retryAfter(New(http.StatusServiceUnavailable, CodeServiceUnavailable,
		"Retry after the number of seconds in Retry-After; if it persists, contact support with the X-Request-Id of the response.",
		"The datastore could not be reached in time."), RetryAfterSeconds)
}

// SecondsUntil is the whole seconds from now until t, at least 1: a Retry-After or
// RateLimit-Reset of 0 would have a client retry at once.
func SecondsUntil(t, now time.Time) int {
	d := t.Sub(now)
	return max(1, int((d+time.Second-1)/time.Second))
}

// decidedAt is the instant a refusal's Retry-After counts from: when admission decided, on the
// clock its reset_at is on, so that Retry-After and RateLimit-Reset agree (docs/api.md, "Headers");
// the wall clock when the refusal does not say.
func decidedAt(at time.Time) time.Time {
	if at.IsZero() {
		return time.Now()
	}
	return at
}

func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
