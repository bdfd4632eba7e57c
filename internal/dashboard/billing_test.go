package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

// Every way of writing a cap: commas between thousands are read as such (the dashboard writes
// the cap that way), a comma before 1 or 2 decimals is a decimal comma, and anything that could
// be read two ways or is not an amount is refused rather than guessed.
func TestParseCap(t *testing.T) {
	good := map[string]float64{
		"5,000": 5000, "1,000,000.50": 1000000.5, "5000": 5000, "12.5": 12.5, "12,50": 12.5, "12,5": 12.5,
		"49.90": 49.9, "0": 0, "0.01": 0.01, " 25 ": 25, "12,345": 12345, "1,000,000,000": 1e9,
		"1,000,000,000.00": 1e9, "5,000.00": 5000, "1000000000": 1e9,
	}
	for typed, want := range good {
		if got, msg := parseCap(typed); msg != "" || got != want {
			t.Errorf("parseCap(%q) = %v %q, want %v", typed, got, msg, want)
		}
	}
	for _, typed := range []string{"5,00,0", "1.000,50", "12.345", "1e3", "abc", "NaN", "Inf", "+Inf", "-5", "-0.5",
		"1,000,000,000.01", "1000000001", "0,125", "12,345.678", "12.", ".5", "1,,000", "1 000", "5.000.000", "€5", "12,5000",
		"1,0000", "99999999999999999999999"} {
		if got, msg := parseCap(typed); msg == "" {
			t.Errorf("parseCap(%q) = %v, want refused", typed, got)
		}
	}
	if _, msg := parseCap("12.345"); !strings.Contains(msg, "like 5,000") {
		t.Errorf("the message shows no example: %q", msg)
	}
}

func TestFormatEUR(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00", 5: "5.00", 999.5: "999.50", 1000: "1,000.00", 5000: "5,000.00",
		1234567.89: "1,234,567.89", 1e9: "1,000,000,000.00"} {
		if got := formatEUR(v); got != want {
			t.Errorf("formatEUR(%v) = %q, want %q", v, got, want)
		}
	}
}

var capInputRE = regexp.MustCompile(`id="cap_eur"[^>]* value="([^"]*)"`)

// The cap form saves "5,000" as five thousand and shows caps with thousands separators; a cap
// it refuses keeps what was typed in the input, with a message that shows an example, and
// leaves the saved cap alone.
func TestSpendCapForm(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	saved := func() *float64 {
		var v *float64
		if err := f.pool.QueryRow(context.Background(), `SELECT hard_cap_eur FROM accounts WHERE id = $1`, acct).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	set := func(typed string) (*http.Response, string) {
		return b.post("/dashboard/billing/spend-cap", url.Values{"csrf": {b.csrf("/dashboard/billing")}, "cap_eur": {typed}, "action": {"set"}})
	}
	for typed, want := range map[string]struct {
		eur   float64
		shown string
	}{"5,000": {5000, "5,000.00"}, "1,000,000.50": {1000000.5, "1,000,000.50"}, "5000": {5000, "5,000.00"},
		"12.5": {12.5, "12.50"}, "12,50": {12.5, "12.50"}, "1,000,000,000": {1e9, "1,000,000,000.00"}} {
		if resp, body := set(typed); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("cap %q: %d\n%s", typed, resp.StatusCode, body)
		}
		if got := saved(); got == nil || *got != want.eur {
			t.Fatalf("cap %q saved as %v, want %v", typed, got, want.eur)
		}
		_, body := b.get("/dashboard/billing")
		if !strings.Contains(body, "Current cap: €"+want.shown+" ") {
			t.Errorf("cap %q: the page does not show €%s", typed, want.shown)
		}
		if m := capInputRE.FindStringSubmatch(body); m == nil || m[1] != want.shown {
			t.Errorf("cap %q: the input shows %v, want %q", typed, m, want.shown)
		}
	}
	set("1,000,000,000")
	for _, typed := range []string{"5,00,0", "1.000,50", "12.345", "1e3", "abc", "NaN", "Inf", "-5", "1,000,000,001"} {
		resp, body := set(typed)
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `id="error"`) {
			t.Fatalf("cap %q: %d, want 422 with a message", typed, resp.StatusCode)
		}
		if m := capInputRE.FindStringSubmatch(body); m == nil || m[1] != typed {
			t.Errorf("cap %q refused: the input shows %v, not what was typed", typed, m)
		}
		if !strings.Contains(body, "5,000") {
			t.Errorf("cap %q refused without an example", typed)
		}
		if got := saved(); got == nil || *got != 1e9 {
			t.Fatalf("cap %q refused but the saved cap changed to %v", typed, got)
		}
	}
}

// sellsNothing is a Stripe with keys but no MAILVET_STRIPE_PRICE_*: it sells no plan.
type sellsNothing struct{ fakeCheckout }

func (*sellsNothing) Sells(plan.Tier) bool { return false }

// A free account is pointed to an upgrade only where the deployment sells one online; a checkout
// for a plan that is not sold is the request's fault (422), and Stripe is not asked.
func TestUpgradeWordingFollowsWhatIsSold(t *testing.T) {
	for _, c := range []struct {
		name     string
		checkout Checkout
		sold     bool
	}{{"no Stripe", nil, false}, {"no prices", &sellsNothing{}, false}, {"prices", &fakeCheckout{}, true}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.h.checkout = c.checkout
			b := f.browser(t)
			b.signup("ann@example.com")
			_, deliveries := b.get("/dashboard/deliveries")
			_, billingPage := b.get("/dashboard/billing")
			if got := strings.Contains(deliveries, "upgrade on the Billing page"); got != c.sold {
				t.Errorf("deliveries point to the Billing page: %v, want %v", got, c.sold)
			}
			if got := strings.Contains(deliveries, "not sold online on this deployment; ask its operator"); got == c.sold {
				t.Errorf("deliveries say nothing is sold: %v", got)
			}
			if got := strings.Contains(billingPage, "Upgrades are not sold online on this deployment; ask its operator."); got == c.sold {
				t.Errorf("billing says nothing is sold: %v", got)
			}
			if got := strings.Contains(billingPage, `id="upgrade-builder"`); got != c.sold {
				t.Errorf("billing offers builder: %v", got)
			}
			// The limits count emails and billable verifications, as the API does, not requests.
			if c.sold && !strings.Contains(billingPage, "5,000 verifications a month included, €0.0040 per verification beyond, 100 emails verified per minute") {
				t.Errorf("billing does not describe builder's limits in emails and verifications:\n%s", billingPage)
			}
			if !strings.Contains(billingPage, "<dt>Included verifications</dt><dd>500 a month</dd>") || strings.Contains(billingPage, "call") {
				t.Errorf("billing counts calls:\n%s", billingPage)
			}
			if _, overview := b.get("/dashboard/"); !strings.Contains(overview, "10 emails verified per minute") {
				t.Errorf("overview does not give the rate limit in emails:\n%s", overview)
			}
			csrf := b.csrf("/dashboard/billing")
			resp, body := b.post("/dashboard/deliveries/0b6f7d8e-2222-4c3e-9a55-000000000001/retry", url.Values{"csrf": {csrf}})
			if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "upgrade on the Billing page") != c.sold {
				t.Errorf("retry on free: %d", resp.StatusCode)
			}
			if c.sold {
				return
			}
			resp, body = b.post("/dashboard/billing/checkout", url.Values{"csrf": {csrf}, "tier": {"builder"}})
			if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "That plan is not sold online on this deployment; ask its operator.") {
				t.Fatalf("checkout of a plan not sold: %d", resp.StatusCode)
			}
			if fc, ok := c.checkout.(*sellsNothing); ok && fc.sessions != 0 {
				t.Fatal("Stripe was asked for a plan not sold")
			}
		})
	}
	// A paid account is not told that upgrades are not sold.
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("bob@example.com")
	if _, err := f.pool.Exec(context.Background(), `UPDATE accounts SET tier = 'builder'`); err != nil {
		t.Fatal(err)
	}
	if _, body := b.get("/dashboard/billing"); strings.Contains(body, "not sold online") {
		t.Fatal("a paid account is told upgrades are not sold")
	}
}
