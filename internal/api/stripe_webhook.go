package api

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/mailvet/mailvet/internal/billing"
)

// stripeWebhook receives Stripe events (docs/api.md, "Stripe webhook"). The signature is checked over the
// raw body before anything is parsed; the API-version check is skipped because Mailvet reads only
// subscription fields that are stable across Stripe API versions, and a dashboard upgrade of the
// webhook's version must not stop billing updates.
func (s *Server) stripeWebhook(c echo.Context) error {
	if s.cfg.StripeWebhookSecret == "" {
		return Errorf(http.StatusServiceUnavailable, CodeServiceUnavailable,
			"Set STRIPE_WEBHOOK_SECRET on the API servers.", "Stripe webhooks are not configured on this server.")
	}
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return jsonError(err)
	}
	header := c.Request().Header.Get("Stripe-Signature")
	ev, err := webhook.ConstructEventWithOptions(body, header, s.cfg.StripeWebhookSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err == nil && signedInFuture(header, s.now()) {
		err = errSignedInFuture
	}
	if err != nil {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest,
			"Send events signed with the endpoint's signing secret; check STRIPE_WEBHOOK_SECRET.",
			"Header Stripe-Signature is missing, malformed, too old, dated in the future or does not match the body.")
	}
	// The body is read raw for the signature, not through bindJSON, so the NUL rule is applied
	// here: a signed event with a NUL could not be stored, and a 5xx would have Stripe resend it
	// for days.
	if err := refuseNUL(body); err != nil {
		return err
	}
	// And so is the rule on text: bytes that are not UTF-8 (or a lone surrogate escape) would be
	// stored as U+FFFD in an event id or a status (docs/errors.md). Stripe sends neither.
	var syntax *jsonSyntaxError
	if err := strictJSON(body, nil); err != nil && !errors.As(err, &syntax) {
		return err
	}
	out, err := s.events.Apply(c.Request().Context(), ev)
	if errors.Is(err, billing.ErrBadEvent) {
		id := ev.ID
		if len(id) > 64 { // the refusal may be that the id is too long: the answer does not echo it
			id = id[:64] + "…"
		}
		return InvalidRequest("Event %s: %v.", id, err)
	}
	if err != nil {
		return datastoreError(err)
	}
	level := slog.LevelInfo
	if out == billing.UnknownPrice {
		// The customer pays for a price this deployment does not map to a tier
		// (MAILVET_STRIPE_PRICE_*): the tier was left as it is, and only an operator can fix it.
		level = slog.LevelWarn
	}
	s.log.Log(c.Request().Context(), level, "stripe event", "id", ev.ID, "type", string(ev.Type), "outcome", string(out))
	return c.JSON(http.StatusOK, map[string]any{"received": true, "outcome": out})
}

var errSignedInFuture = errors.New("signed in the future")

// signedInFuture reports whether a Stripe-Signature header's timestamp (t=) is later than now by
// more than the tolerance stripe-go allows in the past (webhook.DefaultTolerance): the library
// refuses only old signatures, and an event dated ahead, replayed, would otherwise pass for as long
// as its date is ahead (docs/api.md, "Stripe webhook").
func signedInFuture(header string, now time.Time) bool {
	for _, item := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || k != "t" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return true // the library read it; a t it could not would have been refused
		}
		return time.Unix(sec, 0).After(now.Add(webhook.DefaultTolerance))
	}
	return false
}
