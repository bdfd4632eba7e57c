package list_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// While a list upload reads its file (its list row inserted, so the account row held in key-share
// mode for as long as the file takes), the account's other writers do not wait for it: key
// creation, through the API or the dashboard's once-only forms, locks the account row in a mode
// that key-share does not block.
func TestKeyCreationDoesNotWaitOnAListUpload(t *testing.T) {
	pool := pgtest.New(t)
	accounts := account.NewStore(pool)
	a, err := accounts.Create(context.Background(), account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "account")
	s := list.NewStore(pool, list.Defaults())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		rd, err := list.NewReader(pr, list.Text, "", list.Limits{MaxRows: 1_000_000, MaxLineBytes: 100})
		if err != nil {
			done <- err
			return
		}
		_, err = s.Import(context.Background(), list.Upload{AccountID: a.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder], Now: time.Now()}, rd)
		done <- err
	}()
	for i := range 30000 { // past the reader's look-ahead: the upload is under way, the rest of the file to come
		fmt.Fprintf(pw, "u%d@d.test\n", i)
	}
	time.Sleep(200 * time.Millisecond)
	for _, c := range []struct {
		name   string
		create func(ctx context.Context) error
	}{
		{"standard key", func(ctx context.Context) error {
			_, err := accounts.CreateStandardKeyOnce(ctx, a.ID, "k", "tok-standard", func(plan.Tier) int { return 10 })
			return err
		}},
		{"provisioning key", func(ctx context.Context) error {
			_, err := accounts.CreateProvisioningKeyOnce(ctx, a.ID, "tok-prov")
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.create(ctx)
		cancel()
		if err != nil {
			t.Errorf("%s while a list upload runs: %v", c.name, err)
		}
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("upload: %v", err)
	}
}
