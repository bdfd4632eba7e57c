package api

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
)

// An account whose email is not confirmed (a dashboard sign-up, docs/dashboard.md, "Email
// confirmation") gets no key from any path, and a key it has anyway (made before the account was
// marked) is refused on both route families with email_unconfirmed: its verify quota is zero.
// Confirming the email lets the same keys in again.
func TestUnconfirmedAccountIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a, mgmt := b.account(plan.Free, "")
	std := b.standardKey(a.ID)
	mark := func(unconfirmed bool) {
		_, err := b.pool.Exec(context.Background(), `UPDATE accounts SET email_unconfirmed = $2 WHERE id = $1`, a.ID, unconfirmed)
		mustOK(t, err)
	}
	mark(true)

	store := accountStore(b.pool)
	if _, err := store.CreateStandardKey(t.Context(), a.ID, "more", b.cfg.Plans.MaxKeys); !errors.Is(err, account.ErrEmailUnconfirmed) {
		t.Fatalf("standard key for an unconfirmed account: %v", err)
	}
	if _, err := store.CreateProvisioningKey(t.Context(), a.ID); !errors.Is(err, account.ErrEmailUnconfirmed) {
		t.Fatalf("provisioning key for an unconfirmed account: %v", err)
	}
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "x"}).want(t, http.StatusForbidden, CodeEmailUnconfirmed)
	b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, http.StatusForbidden, CodeEmailUnconfirmed)
	b.call(http.MethodPost, "/v1/email/verify", std.Raw, map[string]string{"email": "ann@example.com"}).want(t, http.StatusForbidden, CodeEmailUnconfirmed)
	b.call(http.MethodPost, "/v1/email/verify/batch", std.Raw, map[string][]string{"emails": {"ann@example.com"}}).want(t, http.StatusForbidden, CodeEmailUnconfirmed)
	var rows int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_log WHERE account_id = $1`, a.ID).Scan(&rows))
	if rows != 0 {
		t.Fatalf("%d usage rows for an unconfirmed account", rows)
	}

	mark(false)
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "x"}).want(t, http.StatusCreated, "")
}
