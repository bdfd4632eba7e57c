package api

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/auth"
)

var (
	formTokenField = regexp.MustCompile(`name="form_token" value="([^"]+)"`)
	newMgmtKey     = regexp.MustCompile(`value="(sk_mgmt_[0-9A-Za-z]+)"`)
)

// The dashboard's Replace rotates the provisioning key in one step: the old key works until the
// new one exists, never both, and never neither. A replacement whose audit event cannot be
// written changes nothing, so the agent keeps its working key (where revoke-then-create would
// leave the account with none); a reload of the answer page replaces nothing a second time.
func TestProvisioningKeyReplacedInOneStep(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	d, acct := newDashboardClient(t, b, "ann@example.com")
	old := b.provisioningKey(acct)
	replace := func() (*http.Response, string, url.Values) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, d.base+"/dashboard/keys?replace=provisioning", nil)
		resp, page := d.do(req)
		m := formTokenField.FindStringSubmatch(page)
		if resp.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("replace confirmation: %d\n%.600s", resp.StatusCode, page)
		}
		form := url.Values{"csrf": {d.csrf("/dashboard/keys")}, "confirm": {"yes"}, "form_token": {m[1]}}
		resp, body := d.post("/dashboard/keys/provisioning/replace", form)
		return resp, body, form
	}

	// The audit log refuses writes: nothing is replaced and the old key still works.
	exec := func(sql string) {
		t.Helper()
		_, err := b.pool.Exec(context.Background(), sql)
		mustOK(t, err)
	}
	exec(`ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	if resp, body, _ := replace(); resp.StatusCode < 500 {
		t.Fatalf("a replacement whose events cannot be written: %d\n%.400s", resp.StatusCode, body)
	}
	b.call(http.MethodGet, "/v1/management/account", old, nil).want(t, http.StatusOK, "")
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'provisioning'`, acct); n != 1 {
		t.Errorf("%d provisioning keys after a failed replacement, want the old one only", n)
	}
	exec(`ALTER TABLE audit_events DROP CONSTRAINT no_more`)

	resp, body, form := replace()
	m := newMgmtKey.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusCreated || m == nil {
		t.Fatalf("replacement: %d\n%.600s", resp.StatusCode, body)
	}
	fresh := m[1]
	b.call(http.MethodGet, "/v1/management/account", old, nil).want(t, http.StatusUnauthorized, CodeInvalidAPIKey)
	b.call(http.MethodGet, "/v1/management/account", fresh, nil).want(t, http.StatusOK, "")
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'provisioning' AND revoked_at IS NULL`, acct); n != 1 {
		t.Errorf("%d active provisioning keys after the replacement, want 1", n)
	}
	events := b.auditEvents(fresh, "50")
	if len(events) < 2 || events[0]["kind"] != "key_created" || events[1]["kind"] != "key_revoked" ||
		events[0]["actor"] != "ann@example.com" || events[1]["actor"] != "ann@example.com" {
		t.Fatalf("events after the replacement: %v, want key_created and key_revoked by ann@example.com", events)
	}
	if d0, _ := events[0]["detail"].(string); !strings.Contains(d0, auth.Mask(fresh)) {
		t.Errorf("key_created names %q, want %s", d0, auth.Mask(fresh))
	}
	if d1, _ := events[1]["detail"].(string); !strings.Contains(d1, auth.Mask(old)) {
		t.Errorf("key_revoked names %q, want %s", d1, auth.Mask(old))
	}

	// The answer page reloaded sends the same form: nothing more is replaced.
	if resp, body := d.post("/dashboard/keys/provisioning/replace", form); resp.StatusCode != http.StatusConflict {
		t.Errorf("the replacement's form sent twice: %d\n%.400s", resp.StatusCode, body)
	}
	b.call(http.MethodGet, "/v1/management/account", fresh, nil).want(t, http.StatusOK, "")
}
