package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
)

// auditEvents lists an account's events through GET /v1/management/audit (each page checked
// against /openapi.json by call), following next_cursor with pages of limit.
func (b *testBundle) auditEvents(key string, limit string) []map[string]any {
	b.t.Helper()
	var out []map[string]any
	path := "/v1/management/audit?limit=" + limit
	for range 50 {
		r := b.call(http.MethodGet, path, key, nil).want(b.t, http.StatusOK, "")
		for _, e := range r.body["events"].([]any) {
			out = append(out, e.(map[string]any))
		}
		next, _ := r.body["next_cursor"].(string)
		if next == "" {
			return out
		}
		path = "/v1/management/audit?limit=" + limit + "&cursor=" + next
	}
	b.t.Fatal("more than 50 pages")
	return nil
}

// Creating and revoking a key through the management API writes key_created and key_revoked with
// the provisioning key's display form as the actor and the client's address; GET
// /v1/management/audit lists them newest first, a page at a time, in the documented shape, and
// never shows any key itself.
func TestManagementKeyChangesAreAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Builder, "")
	created := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "production"}).want(t, 201, "")
	raw, id := created.body["key"].(string), created.body["id"].(string)
	b.call(http.MethodDelete, "/v1/management/keys/"+id, mgmt, nil).want(t, 204, "")

	events := b.auditEvents(mgmt, "1")
	if len(events) != 2 {
		t.Fatalf("%d events, want 2: %v", len(events), events)
	}
	revoked, made := events[0], events[1]
	if made["kind"] != "key_created" || revoked["kind"] != "key_revoked" {
		t.Fatalf("events %v, want key_revoked then key_created", events)
	}
	for _, e := range events {
		if e["outcome"] != "success" || e["actor_type"] != "api_key" || e["actor"] != auth.Mask(mgmt) || e["client_ip"] != "192.0.2.1" {
			t.Errorf("event %v", e)
		}
		if d, _ := e["detail"].(string); !strings.Contains(d, "production") || !strings.Contains(d, auth.Mask(raw)) {
			t.Errorf("detail %q does not name the key", d)
		}
		isoUTC(t, e["at"])
	}
	body := b.call(http.MethodGet, "/v1/management/audit", mgmt, nil).want(t, 200, "").raw
	if strings.Contains(string(body), raw) || strings.Contains(string(body), mgmt) {
		t.Fatal("the audit log shows a key itself")
	}
}

// The account export sends everything the account holds in one answer: each GET writes an
// account_exported event naming the provisioning key, so that an export made with a stolen key
// shows in the audit log; a HEAD, which sends nothing, writes none.
func TestAccountExportIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Builder, "")
	ts := httptest.NewServer(b.srv.Handler()) // over HTTP, where a HEAD's body is dropped
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest(http.MethodHead, ts.URL+"/v1/management/account/export", nil)
	req.Header.Set("Authorization", "Bearer "+mgmt)
	resp, err := ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD of the export: %v %v", resp, err)
	}
	resp.Body.Close()
	if events := b.auditEvents(mgmt, "50"); len(events) != 0 {
		t.Fatalf("events after a HEAD of the export: %v, want none", events)
	}
	b.call(http.MethodGet, "/v1/management/account/export", mgmt, nil).want(t, http.StatusOK, "")
	events := b.auditEvents(mgmt, "50")
	if len(events) != 1 || events[0]["kind"] != string(audit.AccountExported) || events[0]["outcome"] != "success" ||
		events[0]["actor_type"] != "api_key" || events[0]["actor"] != auth.Mask(mgmt) {
		t.Fatalf("events after the export: %v, want one account_exported by %s", events, auth.Mask(mgmt))
	}
}

// One account's events are never listed for another, whatever cursor it sends.
func TestAuditLogIsPerAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, keyA := b.account(plan.Builder, "")
	_, keyB := b.account(plan.Builder, "")
	for _, label := range []string{"one", "two"} {
		b.call(http.MethodPost, "/v1/management/keys", keyA, map[string]string{"label": label}).want(t, 201, "")
	}
	first := b.call(http.MethodGet, "/v1/management/audit?limit=1", keyA, nil).want(t, 200, "")
	cursor, _ := first.body["next_cursor"].(string)
	if cursor == "" {
		t.Fatalf("A's first page of one has no next_cursor: %s", first.raw)
	}
	if got := b.auditEvents(keyB, "50"); len(got) != 0 {
		t.Errorf("B sees %v", got)
	}
	r := b.call(http.MethodGet, "/v1/management/audit?cursor="+cursor, keyB, nil).want(t, 200, "")
	if n := len(r.body["events"].([]any)); n != 0 {
		t.Errorf("B with A's cursor sees %d events: %s", n, r.raw)
	}
	if got := b.auditEvents(keyA, "50"); len(got) != 2 {
		t.Errorf("A sees %d events, want 2", len(got))
	}
}

// Bad paging parameters are 400 invalid_request; a standard key is refused as on every
// management route.
func TestAuditLogRefusesBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acct, mgmt := b.account(plan.Free, "")
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "cursor=abc", "cursor=" + strings.Repeat("A", 101)} {
		b.call(http.MethodGet, "/v1/management/audit?"+q, mgmt, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
	}
	std := b.standardKey(acct.ID)
	b.call(http.MethodGet, "/v1/management/audit", std.Raw, nil).want(t, http.StatusForbidden, CodeWrongKeyType)
}

// A key is never created without its audit event: when the event cannot be written, the
// creation fails with datastore_error and no key exists (docs/security.md, "When an audit write
// fails").
func TestKeyCreationFailsWhenItsEventCannotBeWritten(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acct, mgmt := b.account(plan.Builder, "")
	_, err := b.pool.Exec(context.Background(), `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	mustOK(t, err)
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "unaudited"}).want(t, 500, CodeDatastore)
	var n int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct.ID).Scan(&n))
	if n != 0 {
		t.Errorf("%d standard keys exist after a creation whose event failed", n)
	}
}

// A Stripe subscription event that moves the account to another plan is in its audit log, by
// "stripe"; an event that changes no plan (a renewal) writes nothing.
func TestPlanChangesFromStripeAreAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, stripeEnv)
	_, key := b.account(plan.Free, "cus_audit")
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	b.deliver(subEvent("evt_a1", "customer.subscription.created", t0, map[string]any{"customer": "cus_audit"})).want(t, 200, "")
	b.deliver(subEvent("evt_a2", "customer.subscription.updated", t0.Add(time.Hour), map[string]any{"customer": "cus_audit"})).want(t, 200, "")
	b.deliver(subEvent("evt_a3", "customer.subscription.deleted", t0.Add(2*time.Hour), map[string]any{"customer": "cus_audit", "status": "canceled"})).want(t, 200, "")
	events := b.auditEvents(key, "50")
	if len(events) != 2 {
		t.Fatalf("%d events, want 2 plan changes: %v", len(events), events)
	}
	for i, want := range []string{"plan builder → free (subscription sub_1 canceled)", "plan free → builder (subscription sub_1 active)"} {
		e := events[i]
		if e["kind"] != "plan_changed" || e["actor_type"] != "system" || e["actor"] != "stripe" || e["client_ip"] != nil || e["detail"] != want {
			t.Errorf("event %d: %v, want %q", i, e, want)
		}
	}
}

// Every kind package audit writes is in the OpenAPI enum and in docs/security.md's table, and
// nothing else is: the enum is what clients are generated from.
func TestAuditKindsAreDocumented(t *testing.T) {
	t.Parallel()
	var enum []string
	for _, v := range loadSpecSchema(t, "AuditEvent").Properties["kind"].Value.Enum {
		enum = append(enum, v.(string))
	}
	var kinds []string
	for _, k := range audit.Kinds {
		kinds = append(kinds, string(k))
	}
	if !slices.Equal(enum, kinds) {
		t.Errorf("the OpenAPI enum %v, audit.Kinds %v", enum, kinds)
	}
	doc, err := os.ReadFile("../../docs/security.md")
	mustOK(t, err)
	for _, k := range kinds {
		if !strings.Contains(string(doc), "| `"+k+"` |") {
			t.Errorf("docs/security.md has no row for %s", k)
		}
	}
}
