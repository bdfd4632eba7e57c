package admin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
)

// DemoEmail identifies the demo account of `make run`, so that later runs find it again.
const DemoEmail = "demo@mailvet.local"

// demoKeyLabel marks the standard key that dev mode issues, so that the next run can replace it
// instead of piling up keys until the plan maximum.
const demoKeyLabel = "make run demo"

// DevCredentials are what `make run` prints for a newcomer.
type DevCredentials struct {
	AccountID       string
	Created         bool // the demo account was created by this run
	ProvisioningKey string
	// ReissuedProvisioning says an earlier provisioning key was revoked: only its hash is stored,
	// so the only way to show a working one is to issue a fresh key.
	ReissuedProvisioning bool
	StandardKey          string
	// Plan is the free tier's limits as this process configures them, for the banner; the caller
	// sets it (zero leaves the line out).
	Plan plan.Limits
}

// DevBootstrap finds or creates the demo account (DemoEmail, free tier) and issues a fresh
// provisioning key and a fresh standard key for it. It is for dev mode only: it revokes the demo
// account's previous provisioning key and previous demo standard key.
func DevBootstrap(ctx context.Context, store *account.Store, plans plan.Catalog) (DevCredentials, error) {
	var c DevCredentials
	a, err := store.ByEmail(ctx, DemoEmail)
	if errors.Is(err, account.ErrNotFound) {
		a, err = store.Create(ctx, account.NewAccount{Tier: plan.Free, Email: DemoEmail})
		c.Created = true
	}
	if err != nil {
		return c, err
	}
	c.AccountID = a.ID
	n, err := store.RevokeProvisioningKey(ctx, a.ID)
	if err != nil {
		return c, err
	}
	c.ReissuedProvisioning = n > 0
	pk, err := store.CreateProvisioningKey(ctx, a.ID)
	if err != nil {
		return c, err
	}
	c.ProvisioningKey = pk.Raw

	keys, err := store.ListStandardKeys(ctx, a.ID)
	if err != nil {
		return c, err
	}
	for _, k := range keys {
		if k.Label == demoKeyLabel {
			if err := store.RevokeStandardKey(ctx, a.ID, k.ID); err != nil {
				return c, err
			}
		}
	}
	sk, err := store.CreateStandardKey(ctx, a.ID, demoKeyLabel, plans.MaxKeys)
	if err != nil {
		return c, fmt.Errorf("demo standard key: %w", err)
	}
	c.StandardKey = sk.Raw
	return c, nil
}

// Write prints the credentials with ready-to-paste curl lines against baseURL; the verify example
// checks email.
func (c DevCredentials) Write(w io.Writer, baseURL, email string) {
	state := "existing"
	if c.Created {
		state = "new"
	}
	fmt.Fprintf(w, "\nDemo account (%s, %s): %s\n", DemoEmail, state, c.AccountID)
	if c.ReissuedProvisioning {
		fmt.Fprintln(w, "  The previous provisioning key was revoked and a fresh one issued (only key hashes are stored, so an old key cannot be shown again).")
	}
	fmt.Fprintf(w, "  provisioning key (management API): %s\n", c.ProvisioningKey)
	fmt.Fprintf(w, "  standard key (verify API):         %s\n", c.StandardKey)
	if c.Plan.RateLimitPerMin > 0 {
		fmt.Fprintf(w, "  free tier: %d emails verified a minute, %d a month (a batch of n counts n)\n", c.Plan.RateLimitPerMin, c.Plan.MonthlyCalls)
	}
	fmt.Fprintln(w, "Try:")
	fmt.Fprintf(w, "  curl -s %s/v1/management/account -H 'Authorization: Bearer %s'\n", baseURL, c.ProvisioningKey)
	fmt.Fprintf(w, "  curl -s %s/v1/email/verify -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"email\":\"%s\"}'\n\n",
		baseURL, c.StandardKey, email)
}
