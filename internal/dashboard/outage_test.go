package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
	"github.com/mailvet/mailvet/internal/verification"
)

// wantUnavailable checks a page refused for an outage: 503, Retry-After 2, the page's words, and
// no later than within.
func wantUnavailable(t *testing.T, what string, resp *http.Response, body, words string, took, within time.Duration) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" || !strings.Contains(body, words) {
		t.Errorf("%s: %d, Retry-After %q, want 503 with Retry-After 2 and %q:\n%s", what, resp.StatusCode,
			resp.Header.Get("Retry-After"), words, body)
	}
	t.Logf("%s: %d in %v", what, resp.StatusCode, took)
	if took > within {
		t.Errorf("%s: answered after %v, want within %v", what, took, within)
	}
}

// timed runs a browser request and measures it.
func timed(do func() (*http.Response, string)) (*http.Response, string, time.Duration) {
	start := time.Now()
	resp, body := do()
	return resp, body, time.Since(start)
}

// With Postgres refused or black-holed, the sign-in form and every page behind a session answer a
// 503 page with Retry-After within 2 s (every statement has database.QueryTimeout, 1 s), not a
// 500; the dashboard works again once Postgres is back.
func TestPostgresOutageAnswers503(t *testing.T) {
	for _, mode := range []string{"refused", "black-holed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, nil)
			dbURL, proxy := pgtest.Proxied(t, pgtest.URL(t))
			pool := pgtest.Pool(t, dbURL)
			sink, relay := testMail(t)
			f := &fixture{pool: pool, svc: newTestService(t, loadConfig(t, nil), pool), sink: sink}
			f.h = New(Deps{Config: cfg, Pool: pool, Verify: f.svc, Mailer: relay})
			t.Cleanup(f.h.WaitMail)
			f.h.hasher = hasher{time: 1, memoryKiB: 64, threads: 1}
			f.srv = httptest.NewServer(f.h)
			t.Cleanup(f.srv.Close)

			b := f.browser(t)
			b.signup("ann@example.com")
			csrf := b.csrf("/dashboard/keys")
			anon := f.browser(t)
			signinCSRF := anon.csrf("/dashboard/signin")

			if mode == "refused" {
				proxy.Cut()
			} else {
				proxy.Hold()
			}
			requests := map[string]func() (*http.Response, string){
				"POST /dashboard/keys": func() (*http.Response, string) {
					return b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "label": {"x"}})
				},
				"POST /dashboard/signin": func() (*http.Response, string) {
					return anon.post("/dashboard/signin", url.Values{"csrf": {signinCSRF}, "email": {"ann@example.com"}, "password": {testPassword}})
				},
			}
			for _, path := range []string{"/dashboard/", "/dashboard/keys", "/dashboard/billing", "/dashboard/lists"} {
				requests["GET "+path] = func() (*http.Response, string) { return b.get(path) }
			}
			var wg sync.WaitGroup
			for name, do := range requests {
				wg.Go(func() {
					resp, body, took := timed(do)
					wantUnavailable(t, name, resp, body, "cannot reach its database", took, 2*time.Second)
				})
			}
			wg.Wait()

			proxy.Restore()
			deadline := time.Now().Add(5 * time.Second)
			for {
				resp, _ := b.get("/dashboard/")
				if resp.StatusCode == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Postgres back: overview still %d", resp.StatusCode)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// With Stripe black-holed, the billing portal and upgrade buttons answer a 503 page that says
// billing is temporarily unreachable, with Retry-After, by billing.CallTimeout (5 s) rather than
// a 502 after two 10 s timeouts; with Stripe refusing connections, at once.
func TestStripeOutageAnswers503(t *testing.T) {
	t.Parallel()
	proxy := stripetest.Proxied(t)
	env := map[string]string{"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": "http://" + proxy.Addr(),
		"MAILVET_STRIPE_PRICE_BUILDER": "price_b"}
	f := newFixture(t, env)
	s := billing.NewStripe(billing.Config{SecretKey: stripetest.SecretKey, APIBase: "http://" + proxy.Addr(),
		Prices: map[string]plan.Tier{"price_b": plan.Builder}})
	f.h.portal, f.h.checkout = s, s

	// ann has no Stripe customer yet (the upgrade creates one); bob has one (the upgrade opens
	// Checkout directly, and the portal opens).
	ann, bob := f.browser(t), f.browser(t)
	ann.signup("ann@example.com")
	bob.signup("bob@example.com")
	pgtest.Exec(t, f.pool, `UPDATE accounts SET stripe_customer_id = 'cus_bob' WHERE id = $1`, f.accountOf(t, "bob@example.com"))
	annCSRF, bobCSRF := ann.csrf("/dashboard/billing"), bob.csrf("/dashboard/billing")
	portal := func() (*http.Response, string) {
		return bob.post("/dashboard/billing/portal", url.Values{"csrf": {bobCSRF}})
	}
	upgrades := map[string]func() (*http.Response, string){
		"portal": portal,
		"upgrade without a customer": func() (*http.Response, string) {
			return ann.post("/dashboard/billing/checkout", url.Values{"csrf": {annCSRF}, "tier": {"builder"}})
		},
		"upgrade with a customer": func() (*http.Response, string) {
			return bob.post("/dashboard/billing/checkout", url.Values{"csrf": {bobCSRF}, "tier": {"builder"}})
		},
	}
	// stripe-mock's portal is on an origin of its own, which the page links to (toStripe).
	if resp, body := portal(); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="to-stripe"`) {
		t.Fatalf("portal through the proxy before the outage: %d\n%s", resp.StatusCode, body)
	}

	const words = "Billing is temporarily unreachable"
	for _, outage := range stripetest.Outages(proxy, billing.CallTimeout) {
		outage.Start()
		var wg sync.WaitGroup
		for name, do := range upgrades {
			wg.Go(func() {
				resp, body, took := timed(do)
				wantUnavailable(t, outage.Name+": "+name, resp, body, words, took, outage.Within)
			})
		}
		wg.Wait()
	}
}

// The playground and the list pages pass the verification service's 503 (its fleet down) on
// with the Retry-After and words the API gives it.
func TestAPIUnavailablePassesRetryAfter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.svc.down = &verification.UnavailableError{Cause: queue.ErrNoWorkers}
	b := f.browser(t)
	b.signup("ann@example.com")
	csrf := b.csrf("/dashboard/keys")
	if resp, body := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "label": {"play"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create key: %d\n%s", resp.StatusCode, body)
	}
	var keyID string
	if err := f.pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE account_id = $1 AND label = 'play'`,
		f.accountOf(t, "ann@example.com")).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	const words = "no verifier worker is running"
	resp, body := b.post("/dashboard/playground", url.Values{"csrf": {csrf}, "key_id": {keyID}, "email": {"a@b.example"}})
	wantUnavailable(t, "playground", resp, body, words, 0, time.Second)
	resp, body = b.post("/dashboard/lists/0b6f7d8e-3333-4c3e-9a55-0000000000c1/cancel", url.Values{"csrf": {csrf}})
	wantUnavailable(t, "list cancel", resp, body, words, 0, time.Second)
	// The pages that read lists show the outage too, not a failure of ours.
	resp, body = b.get("/dashboard/lists")
	wantUnavailable(t, "lists page", resp, body, words, 0, time.Second)
	resp, body = b.get("/dashboard/lists/0b6f7d8e-3333-4c3e-9a55-0000000000c1")
	wantUnavailable(t, "list page", resp, body, words, 0, time.Second)
}

// A deployment without Stripe keys cannot open the portal for an account that has a Stripe
// customer (say, one linked by support): a 500 page that says so and no Retry-After, since
// waiting does not help; not a 502 that blames Stripe.
func TestBillingNotConfiguredIsA500(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	s := billing.NewStripe(billing.Config{}) // as the API wires it, with no STRIPE_SECRET_KEY
	f.h.portal, f.h.checkout = s, s
	b := f.browser(t)
	b.signup("ann@example.com")
	pgtest.Exec(t, f.pool, `UPDATE accounts SET stripe_customer_id = 'cus_ann' WHERE id = $1`, f.accountOf(t, "ann@example.com"))
	resp, body := b.post("/dashboard/billing/portal", url.Values{"csrf": {b.csrf("/dashboard/billing")}})
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "Billing is not set up on this Mailvet deployment") ||
		resp.Header.Get("Retry-After") != "" {
		t.Fatalf("portal without Stripe keys: %d Retry-After=%q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
