package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

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

var (
	keyTokenRE  = regexp.MustCompile(`action="/dashboard/keys" class="inline">\s*<input type="hidden" name="csrf" value="[^"]+"><input type="hidden" name="form_token" value="([^"]+)"`)
	provTokenRE = regexp.MustCompile(`action="/dashboard/keys/provisioning"><input type="hidden" name="csrf" value="[^"]+"><input type="hidden" name="form_token" value="([^"]+)"`)
)

// token reads a one-time form token from the keys page.
func (b *browser) token(re *regexp.Regexp) (csrf, token string) {
	b.t.Helper()
	_, body := b.get("/dashboard/keys")
	m, c := re.FindStringSubmatch(body), csrfRE.FindStringSubmatch(body)
	if m == nil || c == nil {
		b.t.Fatalf("no form token on the keys page:\n%s", body)
	}
	return c[1], m[1]
}

// The plan's key maximum is refused as the management API refuses it: 429, saying what to do.
func TestKeyLimitAsTheAPI(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	create := func(label string) (*http.Response, string) {
		csrf, token := b.token(keyTokenRE)
		return b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {label}})
	}
	for _, label := range []string{"one", "two"} { // the free plan's 2
		if resp, _ := create(label); resp.StatusCode != http.StatusCreated {
			t.Fatalf("key %s: %d", label, resp.StatusCode)
		}
	}
	resp, body := create("three")
	if resp.StatusCode != http.StatusTooManyRequests ||
		!strings.Contains(body, "Your plan allows 2 active standard keys. Revoke one before creating another, or upgrade your plan.") {
		t.Fatalf("a key over the plan's maximum: %d\n%s", resp.StatusCode, body)
	}
}

// Reloading the page that shows a new key sends its form again: the form's one-time token makes
// that create nothing and say which key the first one created, for standard keys (even several
// sent at once) and for the provisioning key.
func TestKeyCreationOncePerForm(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	count := func(kind string) int {
		var n int
		if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = $2`, acct, kind).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	csrf, token := b.token(keyTokenRE)
	form := url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"production"}}
	resp, body := b.post("/dashboard/keys", form)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `id="new-key"`) {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	var prefix string
	if err := f.pool.QueryRow(context.Background(), `SELECT prefix FROM api_keys WHERE account_id = $1`, acct).Scan(&prefix); err != nil {
		t.Fatal(err)
	}
	resp, body = b.post("/dashboard/keys", form) // the reload
	want := "This key was already created (production, " + prefix + "); its secret was shown only once — if you did not copy it, revoke it and create another."
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, want) || strings.Contains(body, `id="new-key"`) {
		t.Fatalf("the same form again: %d\n%s", resp.StatusCode, body)
	}
	if n := count("standard"); n != 1 {
		t.Fatalf("%d standard keys after a reload, want 1", n)
	}
	// A double click: the same form sent several times at once creates one key.
	_, token = b.token(keyTokenRE)
	codes := make([]int, 4)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			resp, _ := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"staging"}})
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	created := 0
	for _, c := range codes {
		if c == http.StatusCreated {
			created++
		} else if c != http.StatusConflict {
			t.Fatalf("the same form at once: %v", codes)
		}
	}
	if created != 1 || count("standard") != 2 {
		t.Fatalf("the same form 4 times at once: %v, %d keys; want one created", codes, count("standard"))
	}
	// A malformed token creates nothing.
	if resp, _ := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {"not a token!"}, "label": {"x"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a malformed form token: %d", resp.StatusCode)
	}

	// The provisioning key: the reload says it was created, not that one exists.
	csrf, token = b.token(provTokenRE)
	prov := url.Values{"csrf": {csrf}, "form_token": {token}}
	if resp, _ := b.post("/dashboard/keys/provisioning", prov); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create the provisioning key: %d", resp.StatusCode)
	}
	resp, body = b.post("/dashboard/keys/provisioning", prov)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "This key was already created (provisioning, sk_mgmt_") {
		t.Fatalf("the provisioning form again: %d\n%s", resp.StatusCode, body)
	}
	if n := count("provisioning"); n != 1 {
		t.Fatalf("%d provisioning keys", n)
	}
	// Revoked, and created again from a new form: the old form still creates nothing.
	b.post("/dashboard/keys/provisioning/revoke", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	if resp, body := b.post("/dashboard/keys/provisioning", prov); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "already created") {
		t.Fatalf("the old provisioning form after a revocation: %d", resp.StatusCode)
	}
	_, token = b.token(provTokenRE)
	if resp, _ := b.post("/dashboard/keys/provisioning", url.Values{"csrf": {csrf}, "form_token": {token}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a new provisioning form: %d", resp.StatusCode)
	}
}

// Revoking takes two steps without JavaScript: the Revoke button leads to a confirmation that
// names the key, and only its form revokes. A revocation posted without it revokes nothing.
func TestRevokeAsksFirst(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	csrf, token := b.token(keyTokenRE)
	b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"production"}})
	_, token = b.token(provTokenRE)
	b.post("/dashboard/keys/provisioning", url.Values{"csrf": {csrf}, "form_token": {token}})
	var id, prefix, provPrefix string
	if err := f.pool.QueryRow(context.Background(), `SELECT id, prefix FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct).Scan(&id, &prefix); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(context.Background(), `SELECT prefix FROM api_keys WHERE account_id = $1 AND kind = 'provisioning'`, acct).Scan(&provPrefix); err != nil {
		t.Fatal(err)
	}
	active := func() int {
		var n int
		_ = f.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND revoked_at IS NULL`, acct).Scan(&n)
		return n
	}

	_, page := b.get("/dashboard/keys")
	if strings.Contains(page, `method="post" action="/dashboard/keys/`+id+`/revoke"`) || strings.Contains(page, `method="post" action="/dashboard/keys/provisioning/revoke"`) {
		t.Fatal("the keys page revokes in one click")
	}
	if !strings.Contains(page, `name="revoke" value="`+id+`"`) || !strings.Contains(page, `name="revoke" value="provisioning"`) {
		t.Fatal("the keys page has no Revoke buttons leading to the confirmation")
	}
	for _, c := range []struct{ which, question, action string }{
		{id, "Revoke key production (" + prefix + ")?", "/dashboard/keys/" + id + "/revoke"},
		{"provisioning", "Revoke the provisioning key (" + provPrefix + ")?", "/dashboard/keys/provisioning/revoke"},
	} {
		resp, body := b.get("/dashboard/keys?revoke=" + c.which)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, c.question) || !strings.Contains(body, "Clients using it stop working at once.") ||
			!strings.Contains(body, `action="`+c.action+`"`) || !strings.Contains(body, `name="confirm" value="yes"`) ||
			!strings.Contains(body, `href="/dashboard/keys" id="cancel-revoke">Cancel<`) {
			t.Fatalf("confirmation of %s: %d\n%s", c.which, resp.StatusCode, body)
		}
		// Posted without the confirmation: sent to it, nothing revoked.
		resp, _ = b.post(c.action, url.Values{"csrf": {csrf}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/keys?revoke="+c.which || active() != 2 {
			t.Fatalf("%s without confirm: %d %s, %d active keys", c.action, resp.StatusCode, resp.Header.Get("Location"), active())
		}
	}
	if resp, _ := b.get("/dashboard/keys?revoke=0b6f7d8e-1111-4c3e-9a55-000000000001"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("confirmation of an unknown key: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/keys/"+id+"/revoke", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != "/dashboard/keys?done=revoked" {
		t.Fatalf("confirmed revocation: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/dashboard/keys/provisioning/revoke", url.Values{"csrf": {csrf}, "confirm": {"yes"}}); resp.Header.Get("Location") != "/dashboard/keys?done=prov-gone" {
		t.Fatalf("confirmed provisioning revocation: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := active(); n != 0 {
		t.Fatalf("%d keys active after both revocations", n)
	}
	if resp, _ := b.get("/dashboard/keys?revoke=" + id); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("confirmation of a revoked key: %d", resp.StatusCode)
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

// The usage period's end is exclusive: the overview names the last day it includes.
func TestPeriodText(t *testing.T) {
	month := func(y int, m time.Month) (time.Time, time.Time) {
		s := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 1, 0)
	}
	for _, c := range []struct {
		y    int
		m    time.Month
		want string
	}{{2026, time.November, "1 Nov – 30 Nov 2026"}, {2026, time.December, "1 Dec – 31 Dec 2026"}, {2028, time.February, "1 Feb – 29 Feb 2028"}} {
		if got := periodText(month(c.y, c.m)); got != c.want {
			t.Errorf("%d-%02d: %q, want %q", c.y, c.m, got, c.want)
		}
	}
	if got := periodText(time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)); got != "20 Dec 2026 – 19 Jan 2027" {
		t.Errorf("across a year: %q", got)
	}
}

// The playground shows smtp_reply as the server wrote it, and every other field as its value.
func TestPlaygroundFieldValues(t *testing.T) {
	for _, c := range []struct{ name, raw, want string }{
		{"smtp_reply", `{"code":550,"enhanced_code":"5.1.1","text":"No such user here"}`, "550 5.1.1 No such user here"},
		{"smtp_reply", `{"code":421,"enhanced_code":null,"text":"Try later"}`, "421 Try later"},
		{"smtp_reply", `{"code":250,"enhanced_code":"2.0.0","text":""}`, "250 2.0.0"},
		{"smtp_reply", `null`, "null"},
		{"status", `"deliverable"`, "deliverable"},
		{"confidence", `0.95`, "0.95"},
	} {
		if got := fieldValue(c.name, []byte(c.raw)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.name, c.raw, got, c.want)
		}
	}
}
