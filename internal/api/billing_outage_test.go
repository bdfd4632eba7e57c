package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
)

// With Stripe black-holed (connections accepted, nothing answered) or refusing connections, the
// portal answers 503 service_unavailable with Retry-After 2, as its action promises: black-holed
// by billing.CallTimeout (5 s, its retry included), not after two 10 s timeouts; refused at once.
func TestBillingPortalStripeOutage(t *testing.T) {
	t.Parallel()
	proxy := stripetest.Proxied(t)
	b := setup(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": "http://" + proxy.Addr()})
	_, key := b.account(plan.Builder, "cus_outage")
	portal := func() reply {
		return b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL})
	}
	portal().want(t, 200, "")

	for _, outage := range stripetest.Outages(proxy, billing.CallTimeout) {
		outage.Start()
		start := time.Now()
		r := portal().want(t, 503, CodeServiceUnavailable)
		if took := time.Since(start); took > outage.Within {
			t.Errorf("Stripe %s: answered after %v, want within %v", outage.Name, took, outage.Within)
		}
		if got := r.header.Get("Retry-After"); got != retryAfterSeconds {
			t.Errorf("Stripe %s: Retry-After %q, want %q", outage.Name, got, retryAfterSeconds)
		}
		if action, _ := r.body["action"].(string); !strings.Contains(action, "Retry in a few seconds") {
			t.Errorf("Stripe %s: action %q", outage.Name, action)
		}
		if strings.Contains(string(r.raw), proxy.Addr()) || strings.Contains(string(r.raw), "deadline") {
			t.Errorf("Stripe %s: internals leak into the response: %s", outage.Name, r.raw)
		}
	}
}
