package dashboard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
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

// Opening the billing portal writes billing_portal_opened before the browser is sent to Stripe:
// the portal changes the card and the subscription out of Mailvet's sight, so a stolen session
// that opens it shows on the Security page. A portal whose event cannot be written is refused,
// and its address never reaches the browser (docs/security.md, "Audit log").
func TestBillingPortalIsAudited(t *testing.T) {
	t.Parallel()
	const portalURL = "https://billing.stripe.com/p/session/test_portal"
	stripeAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "bps_1", "object": "billing_portal.session", "url": portalURL})
	}))
	t.Cleanup(stripeAPI.Close)
	f := newFixture(t, map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": stripeAPI.URL})
	s := billing.NewStripe(billing.Config{SecretKey: stripetest.SecretKey, APIBase: stripeAPI.URL})
	f.h.portal, f.h.checkout = s, s

	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	pgtest.Exec(t, f.pool, `UPDATE accounts SET stripe_customer_id = 'cus_portal' WHERE id = '`+acct+`'`)
	resp, body := b.post("/dashboard/billing/portal", url.Values{"csrf": {b.csrf("/dashboard/billing")}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != portalURL {
		t.Fatalf("portal: %d %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	events := f.events(t, acct)
	last := events[len(events)-1]
	if last.Kind != audit.BillingPortalOpened || last.Outcome != audit.Success || last.Actor != "ann@example.com" ||
		last.Client.String() != "127.0.0.1" || !strings.Contains(last.Detail, "/dashboard/billing") {
		t.Fatalf("last event %+v, want billing_portal_opened by ann from 127.0.0.1", last)
	}
	if _, page := b.get("/dashboard/security"); !strings.Contains(page, "Billing portal opened") {
		t.Errorf("the Security page does not name the portal's opening")
	}

	pgtest.Exec(t, f.pool, `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	resp, body = b.post("/dashboard/billing/portal", url.Values{"csrf": {b.csrf("/dashboard/billing")}})
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(body, portalURL) || resp.Header.Get("Location") != "" {
		t.Fatalf("portal without its event: %d %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
}
