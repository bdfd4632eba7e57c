package admin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// confirm-email on real Postgres: an unconfirmed sign-up, which gets no provisioning key, is
// confirmed (one email_confirmed event by the operator) and then gets one; confirming again says
// it already was and records nothing; an account an operator made was never unconfirmed; a
// confirmation whose event cannot be written is not made.
func TestConfirmEmail(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	store := account.NewStore(pool)
	ctx := context.Background()
	signup, err := runJSON(t, store, "create-account", "--tier", "free", "--email", "ann@acme.example")
	if err != nil {
		t.Fatal(err)
	}
	id := signup["account_id"].(string)
	// What a dashboard sign-up writes before its link is opened (migrations/00025).
	pgtest.Exec(t, pool, `UPDATE accounts SET email_unconfirmed = true WHERE id = $1`, id)
	unconfirmed := func() bool {
		var u bool
		if err := pool.QueryRow(ctx, `SELECT email_unconfirmed FROM accounts WHERE id = $1`, id).Scan(&u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	if m, err := runJSON(t, store, "create-provisioning-key", "--account", id); err == nil || m["error"] != "email_unconfirmed" {
		t.Fatalf("a key for an unconfirmed account: %v %v", m, err)
	}

	// A confirmation whose audit event cannot be written fails and confirms nothing.
	pgtest.Exec(t, pool, `ALTER TABLE audit_events ADD CONSTRAINT no_more CHECK (false) NOT VALID`)
	if m, err := runJSON(t, store, "confirm-email", "--account", id); err == nil || m["error"] != "datastore_error" {
		t.Fatalf("confirm-email without its event: %v %v", m, err)
	}
	if !unconfirmed() {
		t.Fatal("the email was confirmed without its audit event")
	}
	pgtest.Exec(t, pool, `ALTER TABLE audit_events DROP CONSTRAINT no_more`)

	m, err := runJSON(t, store, "confirm-email", "--account", id)
	if err != nil || m["account_id"] != id || m["email"] != "ann@acme.example" || m["email_confirmed"] != true || m["already_confirmed"] != false {
		t.Fatalf("confirm-email: %v %v", m, err)
	}
	if unconfirmed() {
		t.Fatal("confirm-email left the account unconfirmed")
	}
	m, err = runJSON(t, store, "confirm-email", "--account", id)
	if err != nil || m["email_confirmed"] != true || m["already_confirmed"] != true {
		t.Fatalf("confirm-email again: %v %v", m, err)
	}
	page, err := audit.List(ctx, pool, id, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 {
		t.Fatalf("%d events, want the one confirmation: %+v", len(page.Events), page.Events)
	}
	if e := page.Events[0]; e.Kind != audit.EmailConfirmed || e.Outcome != audit.Success || e.ActorType != audit.ActorSystem ||
		e.Actor != Operator || e.Detail != "email confirmed by an operator" {
		t.Errorf("event %+v", e)
	}
	if k, err := runJSON(t, store, "create-provisioning-key", "--account", id); err != nil || k["key"] == nil {
		t.Errorf("a key for the confirmed account: %v %v", k, err)
	}

	// An operator's account is trusted from the start.
	trusted, err := runJSON(t, store, "create-account", "--tier", "builder")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := runJSON(t, store, "confirm-email", "--account", trusted["account_id"].(string)); err != nil || m["already_confirmed"] != true || m["email"] != nil {
		t.Errorf("confirm-email of an operator's account: %v %v", m, err)
	}

	for _, f := range []struct {
		args  []string
		code  string
		usage bool
	}{
		{[]string{"confirm-email"}, "invalid_request", true},
		{[]string{"confirm-email", "--account", id, "extra"}, "invalid_request", true},
		{[]string{"confirm-email", "--account", "not-a-uuid"}, "not_found", false},
		{[]string{"confirm-email", "--account", "0199a1b2-0000-7000-8000-000000000009"}, "not_found", false},
	} {
		m, err := runJSON(t, store, f.args...)
		if err == nil || m["error"] != f.code || errors.Is(err, ErrUsage) != f.usage {
			t.Errorf("%v: %v %v", f.args, m, err)
		}
	}

	var out bytes.Buffer
	if err := Run(ctx, nil, []string{"help", "confirm-email"}, &out); err != nil || !strings.HasPrefix(out.String(), "usage: api admin confirm-email --account ID") ||
		!strings.Contains(out.String(), "mailed at sign-up") {
		t.Errorf("help confirm-email: %v\n%s", err, out.String())
	}
}
