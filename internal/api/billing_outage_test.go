package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// With Stripe black-holed (connections accepted, nothing answered) or refusing connections, the
// portal answers 503 service_unavailable with Retry-After 2, as its action promises: black-holed
// by billing.CallTimeout (5 s, its retry included), not after two 10 s timeouts; refused at once.
func TestBillingPortalStripeOutage(t *testing.T) {
	t.Parallel()
	proxy, err := tcpproxy.Start(strings.TrimPrefix(stripetest.URL(t), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	b := setup(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": "http://" + proxy.Addr()})
	_, key := b.account(plan.Builder, "cus_outage")
	portal := func() reply {
		return b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL})
	}
	portal().want(t, 200, "")

	for _, outage := range []struct {
		name   string
		start  func()
		within time.Duration
	}{
		{"black-holed", proxy.Hold, billing.CallTimeout + 2*time.Second},
		{"refused", proxy.Cut, 2 * time.Second},
	} {
		outage.start()
		start := time.Now()
		r := portal().want(t, 503, CodeServiceUnavailable)
		if took := time.Since(start); took > outage.within {
			t.Errorf("Stripe %s: answered after %v, want within %v", outage.name, took, outage.within)
		}
		if got := r.header.Get("Retry-After"); got != retryAfterSeconds {
			t.Errorf("Stripe %s: Retry-After %q, want %q", outage.name, got, retryAfterSeconds)
		}
		if action, _ := r.body["action"].(string); !strings.Contains(action, "Retry in a few seconds") {
			t.Errorf("Stripe %s: action %q", outage.name, action)
		}
		if strings.Contains(string(r.raw), proxy.Addr()) || strings.Contains(string(r.raw), "deadline") {
			t.Errorf("Stripe %s: internals leak into the response: %s", outage.name, r.raw)
		}
	}
}
