package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// The operator's changes to an account are in its audit log, by "operator (api admin)", with
// the key's display form and never the key; a command that changes nothing records nothing, and
// a change whose event cannot be written is not made.
func TestAdminCommandsAreAudited(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	store := account.NewStore(pool)
	ctx := context.Background()
	acct, err := runJSON(t, store, "create-account", "--tier", "free")
	if err != nil {
		t.Fatal(err)
	}
	id := acct["account_id"].(string)
	key, err := runJSON(t, store, "create-provisioning-key", "--account", id)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"create-provisioning-key", "--account", id}, // refused: one exists; records nothing
		{"revoke-provisioning-key", "--account", id},
		{"revoke-provisioning-key", "--account", id}, // nothing to revoke; records nothing
		{"set-tier", "--account", id, "--tier", "scale"},
		{"set-tier", "--account", id, "--tier", "scale"}, // no change; records nothing
		{"set-spend-cap", "--account", id, "--eur", "250"},
	} {
		_, _ = runJSON(t, store, args...)
	}
	page, err := audit.List(ctx, pool, id, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := key["prefix"].(string)
	want := []struct {
		kind   audit.Kind
		detail string
	}{
		{audit.SpendCapChanged, "spend cap set to €250.00"},
		{audit.PlanChanged, "plan free → scale"},
		{audit.KeyRevoked, "provisioning key " + prefix + " (provisioning)"},
		{audit.KeyCreated, "provisioning key " + prefix + " (provisioning)"},
	}
	if len(page.Events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(page.Events), len(want), page.Events)
	}
	for i, w := range want {
		e := page.Events[i]
		if e.Kind != w.kind || e.Detail != w.detail || e.ActorType != audit.ActorSystem || e.Actor != Operator ||
			e.Outcome != audit.Success || strings.Contains(e.Detail, key["key"].(string)) {
			t.Errorf("event %d: %+v, want %s %q", i, e, w.kind, w.detail)
		}
	}

	pgtest.Exec(t, pool, `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	m, err := runJSON(t, store, "create-provisioning-key", "--account", id)
	if err == nil || m["error"] != "datastore_error" {
		t.Fatalf("a key whose event cannot be written: %v %v", m, err)
	}
	if k, err := store.ProvisioningKey(ctx, id); err != nil || k != nil {
		t.Errorf("a key was created without its event: %+v %v", k, err)
	}
}
