package api

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
)

const returnURL = "https://app.example.com/settings/billing"

func TestBillingPortalWithStripeMock(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": stripetest.URL(t)})
	_, key := b.account(plan.Builder, "cus_mock1")
	r := b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL}).want(t, 200, "")
	if u, _ := r.body["url"].(string); !strings.HasPrefix(u, "https://") {
		t.Fatalf("portal url %q", r.body["url"])
	}

	_, noCustomer := b.account(plan.Free, "")
	b.call(http.MethodPost, "/v1/management/billing/portal", noCustomer, map[string]string{"return_url": returnURL}).
		want(t, 402, CodeNoBillingCustomer)
}

func TestBillingPortalBadInput(t *testing.T) {
	t.Parallel()
	// Validation comes before any Stripe call, so no Stripe is needed here.
	b := setup(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": "http://127.0.0.1:1"})
	_, key := b.account(plan.Builder, "cus_bad_input")
	for name, body := range map[string]any{
		"missing":        `{}`,
		"null":           `{"return_url": null}`,
		"wrong type":     `{"return_url": 42}`,
		"http":           map[string]string{"return_url": "http://app.example.com/"},
		"javascript":     map[string]string{"return_url": "javascript:alert(1)"},
		"relative":       map[string]string{"return_url": "/settings"},
		"userinfo":       map[string]string{"return_url": "https://user:pw@app.example.com/"},
		"userinfo trick": map[string]string{"return_url": "https://app.example.com@evil.example/"},
		"IPv4 literal":   map[string]string{"return_url": "https://10.0.0.1/"},
		"IPv6 literal":   map[string]string{"return_url": "https://[::1]/"},
		"localhost":      map[string]string{"return_url": "https://localhost/"},
		"no host":        map[string]string{"return_url": "https:///path"},
		"too long":       map[string]string{"return_url": "https://app.example.com/" + strings.Repeat("a", 2100)},
		"empty":          map[string]string{"return_url": ""},
		// An IP address in the spellings a browser reads as one (WHATWG URL), localhost and
		// single-label names in their fully qualified spelling, hosts and ports that are no
		// host or port at all: each is a client's mistake, never Stripe's refusal and a 500.
		"IPv4 short form":             map[string]string{"return_url": "https://127.1/"},
		"IPv4 hex form":               map[string]string{"return_url": "https://0x7f.1/"},
		"IPv4 decimal, qualified":     map[string]string{"return_url": "https://2130706433./"},
		"localhost, qualified":        map[string]string{"return_url": "https://localhost./"},
		"under .localhost, qualified": map[string]string{"return_url": "https://app.localhost./"},
		"single label, qualified":     map[string]string{"return_url": "https://intranet./"},
		"empty label":                 map[string]string{"return_url": "https://app..example.com/"},
		"leading hyphen":              map[string]string{"return_url": "https://-app.example.com/"},
		"port 0":                      map[string]string{"return_url": "https://app.example.com:0/"},
		"port over 65535":             map[string]string{"return_url": "https://app.example.com:99999/"},
	} {
		t.Run(name, func(t *testing.T) {
			r := b.call(http.MethodPost, "/v1/management/billing/portal", key, body).want(t, 400, CodeInvalidRequest)
			if !strings.Contains(r.body["message"].(string), "return_url") {
				t.Errorf("message %q does not name return_url", r.body["message"])
			}
		})
	}
	// Host names a browser and Stripe take pass the check: here they reach the unreachable Stripe.
	for _, u := range []string{"https://app.example.com./billing", "https://b\u00fccher.example/", "https://app.example.com:8443/x"} {
		b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": u}).
			want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	}
	b.call(http.MethodPost, "/v1/management/billing/portal", key, `{"return_url": "`+returnURL+`", "extra": 1}`).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodPost, "/v1/management/billing/portal", key, "return_url="+returnURL, "Content-Type", "application/x-www-form-urlencoded").
		want(t, 400, CodeInvalidRequest)
}

// fakeStripe answers the portal-session call the way a misbehaving Stripe would.
func fakeStripe(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/billing_portal/sessions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestBillingPortalProviderFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		status int
		code   string
	}{
		{"no portal URL", map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey,
			"MAILVET_STRIPE_API_BASE": fakeStripe(t, 200, `{"id": "bps_1", "object": "billing_portal.session", "url": null}`)},
			500, CodeBillingPortalUnavailable},
		{"Stripe error", map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey,
			"MAILVET_STRIPE_API_BASE": fakeStripe(t, 400, `{"error": {"type": "invalid_request_error", "message": "No such customer"}}`)},
			500, CodeBillingPortalUnavailable},
		{"Stripe unreachable", map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": closedPort(t)},
			503, CodeServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.env)
			_, key := b.account(plan.Scale, "cus_failing")
			r := b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL}).
				want(t, tt.status, tt.code)
			if strings.Contains(string(r.raw), "No such customer") || strings.Contains(string(r.raw), "127.0.0.1") {
				t.Errorf("provider internals leak into the response: %s", r.raw)
			}
		})
	}
}

// A deployment without Stripe keeps the route's 500 billing_portal_unavailable, but says what is
// wrong and that retrying cannot help: only an operator can fix it.
func TestBillingPortalNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{})
	_, key := b.account(plan.Scale, "cus_unconfigured")
	r := b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL}).
		want(t, 500, CodeBillingPortalUnavailable)
	msg, _ := r.body["message"].(string)
	action, _ := r.body["action"].(string)
	if !strings.Contains(msg, "not configured") || !strings.Contains(action, "STRIPE_SECRET_KEY") ||
		!strings.Contains(action, "Do not retry") || strings.Contains(action, "Retry later") {
		t.Errorf("message %q, action %q: want billing not configured, no retry", msg, action)
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on an answer that retrying cannot change", r.header.Get("Retry-After"))
	}
}

// Neither Stripe secret reaches a log line or an answer: not on a webhook with a wrong, missing or
// good signature, not when Stripe refuses the key (its message names the key masked, as Stripe's
// does), not when Stripe is unreachable (docs/security.md).
func TestStripeSecretsAreNotLogged(t *testing.T) {
	t.Parallel()
	const secretKey = "sk_test_51SecretNeverLogged0000000000"
	const hookSecret = "whsec_SecretNeverLogged0000000000"
	env := map[string]string{"STRIPE_SECRET_KEY": secretKey, "STRIPE_WEBHOOK_SECRET": hookSecret,
		"MAILVET_STRIPE_PRICE_BUILDER": priceBuilder,
		"MAILVET_STRIPE_API_BASE": fakeStripe(t, 401, `{"error": {"type": "invalid_request_error",
			"message": "Invalid API Key provided: sk_test_****************0000"}}`)}
	var logs logtest.Buffer
	b := setup(t, env, func(d *Deps) { d.Log = app.NewLogger(&logs, "test") })
	_, key := b.account(plan.Free, "cus_secret")
	var answers []string
	good := subEvent("evt_secret", "customer.subscription.created", time.Now(), map[string]any{"customer": "cus_secret"})
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: hookSecret})
	wrong := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: "whsec_other"})
	answers = append(answers,
		string(b.call(http.MethodPost, "/v1/stripe/webhook", "", good).want(t, 400, CodeInvalidRequest).raw),
		string(b.call(http.MethodPost, "/v1/stripe/webhook", "", good, "Stripe-Signature", wrong.Header).want(t, 400, CodeInvalidRequest).raw),
		string(b.call(http.MethodPost, "/v1/stripe/webhook", "", good, "Stripe-Signature", signed.Header).want(t, 200, "").raw),
		string(b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL}).
			want(t, 500, CodeBillingPortalUnavailable).raw))
	unreachable := setup(t, map[string]string{"STRIPE_SECRET_KEY": secretKey, "MAILVET_STRIPE_API_BASE": closedPort(t)},
		func(d *Deps) { d.Log = app.NewLogger(&logs, "test") })
	_, key2 := unreachable.account(plan.Builder, "cus_secret2")
	answers = append(answers, string(unreachable.call(http.MethodPost, "/v1/management/billing/portal", key2,
		map[string]string{"return_url": returnURL}).want(t, 503, CodeServiceUnavailable).raw))
	if !strings.Contains(logs.String(), "evt_secret") {
		t.Fatalf("the log has no line of the applied event, so the test saw no log: %q", logs.String())
	}
	for _, s := range []string{secretKey, hookSecret, "SecretNeverLogged"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log holds a Stripe secret (%s): %s", s, logs.String())
		}
		for _, a := range answers {
			if strings.Contains(a, s) {
				t.Errorf("an answer holds a Stripe secret (%s): %s", s, a)
			}
		}
	}
	for _, a := range answers {
		if strings.Contains(a, "Invalid API Key") {
			t.Errorf("Stripe's message reaches the customer: %s", a)
		}
	}
}

// A billing portal session opened with the management API writes billing_portal_opened, by the
// provisioning key, before its address is answered; one whose event cannot be written is
// refused without the address (docs/security.md, "Audit log").
func TestBillingPortalIsAudited(t *testing.T) {
	t.Parallel()
	const portalURL = "https://billing.stripe.com/p/session/test_api"
	b := setup(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey,
		"MAILVET_STRIPE_API_BASE": fakeStripe(t, 200, `{"id": "bps_1", "object": "billing_portal.session", "url": "`+portalURL+`"}`)})
	_, key := b.account(plan.Builder, "cus_audited")
	r := b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL}).want(t, 200, "")
	if r.body["url"] != portalURL {
		t.Fatalf("portal url %v", r.body["url"])
	}
	events := b.auditEvents(key, "10")
	if len(events) == 0 {
		t.Fatal("no event for the portal")
	}
	e := events[0]
	if e["kind"] != "billing_portal_opened" || e["outcome"] != "success" || e["actor_type"] != "api_key" ||
		e["actor"] != auth.Mask(key) || e["client_ip"] != "192.0.2.1" || e["detail"] != "returns to "+returnURL {
		t.Fatalf("newest event %v, want billing_portal_opened by the key", e)
	}
	// The event names the page, never the query or fragment, which can carry a token of the
	// customer's application for the audit log's year.
	b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL + "?session=s3cret#s3cret"}).want(t, 200, "")
	if e := b.auditEvents(key, "1")[0]; e["detail"] != "returns to "+returnURL {
		t.Errorf("detail %q; want the page without its query and fragment", e["detail"])
	}

	pgtest.Exec(t, b.pool, `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	r = b.call(http.MethodPost, "/v1/management/billing/portal", key, map[string]string{"return_url": returnURL + "?again"}).
		want(t, 500, CodeDatastore)
	if strings.Contains(fmt.Sprint(r.body), portalURL) {
		t.Fatalf("the portal's address left without its event: %v", r.body)
	}
}
