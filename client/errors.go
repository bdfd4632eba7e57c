package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The codes of docs/errors.md, one constant each (TestEveryDocumentedCodeHasAConstant), and the
// client's own CodeUnexpectedResponse. A code this version does not name is still an *Error,
// with that Code.
const (
	CodeInvalidRequest           = "invalid_request"
	CodeMissingAPIKey            = "missing_api_key"
	CodeInvalidAPIKey            = "invalid_api_key"
	CodeNoBillingCustomer        = "no_billing_customer"
	CodeWrongKeyType             = "wrong_key_type"
	CodeEmailUnconfirmed         = "email_unconfirmed"
	CodePlanUpgradeRequired      = "plan_upgrade_required"
	CodeNotFound                 = "not_found"
	CodeJobNotFound              = "job_not_found"
	CodeKeyNotFound              = "key_not_found"
	CodeDeliveryNotFound         = "delivery_not_found"
	CodeCustomerNotFound         = "customer_not_found"
	CodeMethodNotAllowed         = "method_not_allowed"
	CodeDeliveryNotReplayable    = "delivery_not_replayable"
	CodeKeyLimitReached          = "key_limit_reached"
	CodeRateLimitExceeded        = "rate_limit_exceeded"
	CodeMonthlyQuotaExceeded     = "monthly_quota_exceeded"
	CodePaymentRequired          = "payment_required"
	CodeDatastoreError           = "datastore_error"
	CodeBillingPortalUnavailable = "billing_portal_unavailable"
	CodeInternalError            = "internal_error"
	CodeServiceUnavailable       = "service_unavailable"
	CodeQuotaCheckFailed         = "quota_check_failed"
	CodePayloadTooLarge          = "payload_too_large"
	CodeRequestTimeout           = "request_timeout"
	CodeListNotFound             = "list_not_found"
	CodeListFinished             = "list_finished"
	CodeSubscriptionActive       = "subscription_active"
	// CodeIdempotencyKeyInUse: a call's earlier attempt, with the same Idempotency-Key, is still
	// running; with retrying on, the client sends it again after Retry-After.
	CodeIdempotencyKeyInUse = "idempotency_key_in_use"
	// CodeIdempotencyKeyReused: the key was used with another request. The client makes a key
	// per call, so it means two calls drew the same key, which 128 random bits make unheard of.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeUnexpectedResponse is not the API's: the client sets it when an answer is not the
	// API's error envelope (a proxy's HTML page, a truncated body).
	CodeUnexpectedResponse = "unexpected_response"
)

// Error is an error the API answered: the error envelope (docs/errors.md) with its HTTP status,
// Retry-After, and the extra fields some codes carry, typed. Fields holds every field of the
// envelope as decoded JSON, including any this version of the client does not know.
type Error struct {
	Status  int    // HTTP status; 503 for the error line that ends an incomplete stream
	Code    string // the envelope's "error": a stable machine code
	Message string
	Action  string
	Docs    string

	// RetryAfter is the Retry-After header (429 and 503 answers); 0 when absent.
	RetryAfter time.Duration

	// RequestID is the answer's X-Request-Id: quote it when you ask for help, it finds the
	// request in the service's logs (docs/errors.md). Empty only when a proxy answered instead.
	RequestID string

	// Extras of rate_limit_exceeded (Limit, Window, ResetAt), monthly_quota_exceeded (Limit,
	// Used, ResetAt) and payment_required (HardCapEUR, CurrentOverageEUR, Room, ResetAt); zero
	// when absent. Room is how many more emails the spend cap allows this month: a request of at
	// most Room emails passes it.
	Limit             int
	Used              int
	Window            string
	ResetAt           time.Time
	HardCapEUR        *float64 // nil when absent or null
	CurrentOverageEUR float64
	Room              int

	// Line, on a list upload refused with invalid_request, is the file's line that could not be
	// read (docs/lists.md, "Bad input"); 0 when the error is not about one line.
	Line int

	// Emails, on the error line that ends an incomplete stream (StreamError in
	// /openapi.json), lists the addresses that were not verified and not charged, in input
	// order: send them again. VerifyStream adds those of the requests it did not send, and sets
	// Indexes to their positions in its emails, as the client counts them: the request's
	// addresses it had no result line for, then those not sent.
	Emails  []string
	Indexes []int

	Fields map[string]any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("mailvet: %d %s: %s", e.Status, e.Code, e.Message)
	if e.Action != "" {
		s += " (" + e.Action + ")"
	}
	if e.RequestID != "" {
		s += " [request id " + e.RequestID + "]"
	}
	return s
}

// envelope is the wire form of the typed fields of Error.
type envelope struct {
	Code              string    `json:"error"`
	Message           string    `json:"message"`
	Action            string    `json:"action"`
	Docs              string    `json:"docs"`
	Limit             int       `json:"limit"`
	Used              int       `json:"used"`
	Window            string    `json:"window"`
	ResetAt           time.Time `json:"reset_at"`
	HardCapEUR        *float64  `json:"hard_cap_eur"`
	CurrentOverageEUR float64   `json:"current_overage_eur"`
	Room              int       `json:"room"`
	Emails            []string  `json:"emails"`
	Line              int       `json:"line"`
}

// decodeEnvelope parses an error envelope; ok is false when raw is not one.
func decodeEnvelope(raw []byte, status int) (*Error, bool) {
	var env envelope
	var fields map[string]any
	if json.Unmarshal(raw, &env) != nil || json.Unmarshal(raw, &fields) != nil || env.Code == "" {
		return nil, false
	}
	return &Error{Status: status, Code: env.Code, Message: env.Message, Action: env.Action, Docs: env.Docs,
		Limit: env.Limit, Used: env.Used, Window: env.Window, ResetAt: env.ResetAt, HardCapEUR: env.HardCapEUR,
		CurrentOverageEUR: env.CurrentOverageEUR, Room: env.Room, Emails: env.Emails, Line: env.Line, Fields: fields}, true
}

// readError turns a response with an unexpected status into an *Error.
func readError(resp *http.Response) *Error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e, ok := decodeEnvelope(raw, resp.StatusCode)
	if !ok {
		text := strings.TrimSpace(string(raw))
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		e = &Error{Status: resp.StatusCode, Code: CodeUnexpectedResponse,
			Message: fmt.Sprintf("HTTP %d without an error envelope: %q", resp.StatusCode, text)}
	}
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	e.RequestID = resp.Header.Get("X-Request-Id")
	return e
}

// requestIDNote is " (request id X)" for an answer's X-Request-Id, or "" without one: the
// client's own errors about an answer (a stream cut short, a body it cannot decode) carry it too,
// so that every failure can be found in the service's logs.
func requestIDNote(id string) string {
	if id == "" {
		return ""
	}
	return " (request id " + id + ")"
}

// retryAfter reads a Retry-After header: seconds, as the API sends, or an HTTP date, as a proxy
// in front of it may (RFC 9110, section 10.2.3). Zero means none, or a time already past. Seconds
// beyond what a time.Duration holds are the longest Duration: multiplied out they would wrap
// around to a short or negative wait, retried at once instead of refused as too long
// (MaxRetryWait).
func retryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case s <= 0:
			return 0
		case s >= math.MaxInt64/int64(time.Second):
			return math.MaxInt64
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
