package api

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// LocalVerifier runs the local layers (syntax, disposable, signals) in the API process; final is
// true when they already decide the result, so no worker round trip is needed.
type LocalVerifier interface {
	Local(raw string) (r verdict.Result, final bool)
}

// Bounds of the verify routes (docs/api.md, "Limits").
const (
	maxEmailLen       = 1024 // longer is not an address; refused before any work
	maxBatch          = 100
	maxStream         = 1000
	minSecretLen      = 8
	maxSecretLen      = 256
	syncDeadline      = 10 * time.Second
	batchDeadline     = 30 * time.Second
	streamDeadline    = 120 * time.Second
	retryAfterSeconds = "2"
)

// holdMargin is how long a request's hold outlives the request's deadline (usage.Request.
// Lifetime): the time for its last rows and its release to be written behind the response, with
// room for a Postgres failover. A replica killed mid-request has its requests' room back within
// their lifetime plus one sweep (docs/reliability.md, "Metering guarantees").
const holdMargin = time.Minute

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
}

func (s *Server) callerOf(c echo.Context) caller {
	p := principalOf(c)
	return caller{account: p.AccountID, key: p.KeyID, tier: p.Tier, plan: s.cfg.Plans.Of(p.Tier)}
}

// checkEmail bounds one address field; its content is the layers' business.
func checkEmail(field, e string) error {
	switch {
	case strings.TrimSpace(e) == "":
		return InvalidRequest("Field %s is empty; send an email address.", field)
	case len(e) > maxEmailLen:
		return InvalidRequest("Field %s is longer than %d bytes.", field, maxEmailLen)
	case !utf8.ValidString(e):
		return InvalidRequest("Field %s is not valid UTF-8.", field)
	}
	return nil
}

// admit runs admission for n emails of a request whose deadline is deadline, and sets the
// RateLimit-* headers. The handler hands the hold it returns the rows of the results that reached
// the client (Deliver) and defers its Close, which gives back whatever was not delivered
// (usage.Ledger).
func (s *Server) admit(c echo.Context, who caller, n int, deadline time.Duration) (*usage.Hold, error) {
	now := s.now()
	hold, d, err := s.ledger.Admit(c.Request().Context(), usage.Request{
		AccountID: who.account, Free: who.tier == plan.Free, Units: n,
		RatePerMin: who.plan.RateLimitPerMin, MonthlyCalls: who.plan.MonthlyCalls,
		OverageEUR: who.plan.OverageEUR, Now: now, Lifetime: deadline + holdMargin,
	})
	s.headroom.Note(who.account, now, d, err)
	// The headers describe the rate window whenever admission got as far as it: also on a quota,
	// spend-cap or datastore refusal that came after the rate step.
	h := c.Response().Header()
	h.Set("RateLimit-Limit", strconv.Itoa(who.plan.RateLimitPerMin))
	var rl *usage.RateLimited
	switch {
	case errors.As(err, &rl):
		// What is left of the window: a request larger than that is refused whole, and a smaller
		// one would still pass.
		h.Set("RateLimit-Remaining", strconv.Itoa(max(0, rl.Limit-rl.Used)))
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(rl.Reset, now)))
	case err == nil || d.RateRead:
		// Past the rate step (a later step may have refused or failed): the decision has what
		// is left of the window.
		h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(d.Reset, now)))
	default:
		// The statement got no answer: what is left of the window is not known, and is not
		// guessed (a 0 would make a client wait for nothing); when it ends is the clock's.
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(usage.WindowEnd(now), now)))
	}
	return hold, err
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
		who, now := s.callerOf(c), s.now()
		h.Set("RateLimit-Limit", strconv.Itoa(who.plan.RateLimitPerMin))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), rateHeaderBudget)
		defer cancel()
		if used, rerr := usage.RateUsed(ctx, s.pool, who.account, now); rerr == nil {
			h.Set("RateLimit-Remaining", strconv.Itoa(max(0, who.plan.RateLimitPerMin-used)))
		}
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(usage.WindowEnd(now), now)))
		return err
	}
}

// secondsUntil is the whole seconds to wait until t, rounded up: a client that waits exactly
// Retry-After (or RateLimit-Reset) seconds must find the window reset, not be refused again.
func secondsUntil(t, now time.Time) int {
	d := t.Sub(now)
	return max(1, int((d+time.Second-1)/time.Second))
}

// item names the email at index i of this request for the usage log.
func (who caller) item(c echo.Context, route string, i int) usage.Item {
	return usage.Item{Key: usageKey(c) + ":" + strconv.Itoa(i), AccountID: who.account, KeyID: who.key, Route: route}
}

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
