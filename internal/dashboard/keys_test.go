package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
)

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

// The keys page creates sandbox keys (docs/sandbox.md): the form's mode, the new key shown as a
// sandbox key (sk_test_…), the list's mode column; a mode that is neither is refused, and a key
// chosen in the playground acts with its mode.
func TestKeysPageSandboxMode(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")

	csrf, token := b.token(keyTokenRE)
	resp, body := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"ci"}, "mode": {"bogus"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Choose the live or the sandbox mode for the key.") {
		t.Fatalf("a bad mode: %d\n%s", resp.StatusCode, body)
	}
	csrf, token = b.token(keyTokenRE)
	resp, body = b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"ci"}, "mode": {"sandbox"}})
	if resp.StatusCode != http.StatusCreated || !strings.Contains(body, "Your new sandbox key") || !regexp.MustCompile(`id="new-key" type="text" readonly value="sk_test_[0-9A-Za-z]{43}"`).MatchString(body) {
		t.Fatalf("create a sandbox key: %d\n%s", resp.StatusCode, body)
	}
	csrf, token = b.token(keyTokenRE)
	if resp, _ := b.post("/dashboard/keys", url.Values{"csrf": {csrf}, "form_token": {token}, "label": {"prod"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a key without a mode (an older form): %d", resp.StatusCode)
	}
	modes := map[string]string{}
	rows, err := f.pool.Query(context.Background(), `SELECT label, mode FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var label, mode string
		if err := rows.Scan(&label, &mode); err != nil {
			t.Fatal(err)
		}
		modes[label] = mode
	}
	if modes["ci"] != "sandbox" || modes["prod"] != "live" || len(modes) != 2 {
		t.Fatalf("keys stored %v", modes)
	}
	_, page := b.get("/dashboard/keys")
	cells := regexp.MustCompile(`<td>(ci|prod)</td><td><code>(sk_(?:test|live)_[^<]+)</code></td><td class="key-mode">(\w+)</td>`).FindAllStringSubmatch(page, -1)
	shown := map[string]string{}
	for _, c := range cells {
		shown[c[1]] = c[3]
		if (c[3] == "Sandbox") != strings.HasPrefix(c[2], "sk_test_") {
			t.Errorf("key %s: prefix %s, mode %s", c[1], c[2], c[3])
		}
	}
	if shown["ci"] != "Sandbox" || shown["prod"] != "Live" {
		t.Errorf("the list shows modes %v:\n%s", shown, page)
	}

	var sandboxID string
	if err := f.pool.QueryRow(context.Background(), `SELECT id FROM api_keys WHERE account_id = $1 AND mode = 'sandbox'`, acct).Scan(&sandboxID); err != nil {
		t.Fatal(err)
	}
	resp, _ = b.post("/dashboard/playground", url.Values{"csrf": {b.csrf("/dashboard/playground")}, "key_id": {sandboxID}, "email": {"accepted@sandbox.mailvet.test"}})
	if c := f.svc.last.Load(); resp.StatusCode != http.StatusOK || c == nil || c.Key != sandboxID || !c.Sandbox {
		t.Errorf("the playground with the sandbox key: %d, caller %+v", resp.StatusCode, c)
	}
}
