package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
)

// Stripe refusing the customer an upgrade creates quotes the address it was given, as its
// email_invalid error does; the page's log line keeps Stripe's reason without the address.
func TestStripeRefusalLoggedWithoutTheEmail(t *testing.T) {
	t.Parallel()
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": "invalid_request_error",
			"code": "email_invalid", "param": "email", "message": "Invalid email address: " + r.PostForm.Get("email")}})
	}))
	t.Cleanup(stripeAPI.Close)
	env := map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": stripeAPI.URL,
		"MAILVET_STRIPE_PRICE_BUILDER": "price_b"}
	logs := &logtest.Buffer{}
	f := newFixture(t, env, func(d *Deps) { d.Log = app.NewLogger(logs, "test") })
	s := billing.NewStripe(billing.Config{SecretKey: stripetest.SecretKey, APIBase: stripeAPI.URL,
		Prices: map[string]plan.Tier{"price_b": plan.Builder}})
	f.h.portal, f.h.checkout = s, s

	const email = "quoted.by.stripe@example.com"
	b := f.browser(t)
	b.signup(email)
	resp, body := b.post("/dashboard/billing/checkout", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "tier": {"builder"}})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("upgrade refused by Stripe: %d, want 502\n%s", resp.StatusCode, body)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "dashboard: billing") {
			line = l
		}
	}
	if !strings.Contains(line, "Invalid email address") || strings.Contains(strings.ToLower(line), email) {
		t.Errorf("the billing log line names the account's email, or not Stripe's reason:\n%s", line)
	}
}
