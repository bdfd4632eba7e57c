package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/verification"
)

// LocalVerifier runs the local layers (syntax, disposable, signals) in the API process; final is
// true when they already decide the result, so no worker round trip is needed.
type LocalVerifier = verification.Local

// Bounds of the verify routes (docs/api.md, "Limits"): the verification service's.
const (
	minSecretLen      = verification.MinSecretLen
	maxSecretLen      = verification.MaxSecretLen
	retryAfterSeconds = "2"
)

type verifyRequest struct {
	Email         *string `json:"email"`
	WebhookURL    *string `json:"webhook_url"`
	CallbackURL   *string `json:"callback_url"`
	WebhookSecret *string `json:"webhook_secret"`
}

type listRequest struct {
	Emails []json.RawMessage `json:"emails"`
}

// caller is the authenticated account as the verify and usage routes need it.
type caller struct {
	account string
	key     string
	tier    plan.Tier
	plan    plan.Limits
	// sandbox: the key is a sandbox key (docs/sandbox.md).
	sandbox bool
}

func (s *Server) callerOf(c echo.Context) caller {
	p := principalOf(c)
	return caller{account: p.AccountID, key: p.KeyID, tier: p.Tier, plan: s.cfg.Plans.Of(p.Tier), sandbox: p.Sandbox()}
}

// request is the verification service's request for this verify call: the caller, and the
// usage-log key of the request.
func (s *Server) request(c echo.Context, start time.Time) verification.Request {
	return verification.Request{Caller: s.verifyCaller(c), Key: usageKey(c), Start: start}
}

// verifyCaller is the authenticated account as the verification service names it.
func (s *Server) verifyCaller(c echo.Context) verification.Caller {
	who := s.callerOf(c)
	return verification.Caller{Account: who.account, Key: who.key, Tier: who.tier, Limits: who.plan, Sandbox: who.sandbox}
}

// setRateHeaders writes the RateLimit-* headers (docs/api.md, "Headers") of the rate window a
// verify request left, when admission ran; rateLimitHeaders covers the other responses.
func setRateHeaders(c echo.Context, w verification.Window) { rateHeaders(c.Response().Header(), w) }

// rateHeaders sets the RateLimit-* headers of w in h.
func rateHeaders(h http.Header, w verification.Window) {
	if !w.Known {
		return
	}
	h.Set("RateLimit-Limit", strconv.Itoa(w.Limit))
	if w.RemainingKnown {
		h.Set("RateLimit-Remaining", strconv.Itoa(w.Remaining))
	}
	h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(w.Reset, w.At)))
}

// rateHeaderBudget bounds the read of the rate window for a verify response refused before
// admission: the refusal must not wait on a slow Postgres for a header.
const rateHeaderBudget = 250 * time.Millisecond

// rateLimitHeaders makes every response of a verify route to an authenticated caller carry the
// RateLimit-* headers (docs/api.md, "Headers"), also one refused before admission ran: bad input
// (400), NATS down (503), a body too slow (408). Admission sets them when it runs; otherwise the
// account's current window is read here, one primary-key look-up, and RateLimit-Remaining is left
// out if that read fails. A response already under way (a stream) is left as it is.
func (s *Server) rateLimitHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		h := c.Response().Header()
		if c.Response().Committed || h.Get("RateLimit-Limit") != "" {
			return err
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), rateHeaderBudget)
		defer cancel()
		setRateHeaders(c, s.verify.CurrentWindow(ctx, s.verifyCaller(c)))
		return err
	}
}

// secondsUntil is the whole seconds to wait until t, rounded up: a client that waits exactly
// Retry-After (or RateLimit-Reset) seconds must find the window reset, not be refused again.
func secondsUntil(t, now time.Time) int { return problem.SecondsUntil(t, now) }

// usageKey prefixes the usage-log item keys of one request. It is generated here, never taken
// from the client's X-Request-ID: a client that reused one would otherwise have its later rows
// skipped as duplicates, and not counted.
func usageKey(c echo.Context) string {
	if k, ok := c.Get(usageKeyCtx).(string); ok {
		return k
	}
	k := uuid.NewString()
	c.Set(usageKeyCtx, k)
	return k
}

const usageKeyCtx = "mailvet.usage_key"
