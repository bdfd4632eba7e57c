package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// export reads the account's export whole and decodes it.
func export(t *testing.T, c *client.Client) (raw string, doc struct {
	Account struct {
		AccountID string `json:"account_id"`
	} `json:"account"`
	Keys    []map[string]any `json:"keys"`
	Results []struct {
		Result struct{ Email string } `json:"result"`
	} `json:"results"`
	Truncated []string `json:"truncated"`
}) {
	t.Helper()
	body, err := c.ExportAccount(context.Background())
	if err != nil {
		t.Fatalf("ExportAccount: %v", err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading the export: %v", err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the export is not JSON: %v\n%s", err, b)
	}
	return string(b), doc
}

// End to end on the real server: export, delete one address's history, delete the account.
func TestE2EPersonalData(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	ctx := context.Background()
	m := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL))
	v := client.New(s.StandardKey, client.WithBaseURL(s.URL))
	acct, err := m.Account(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"ann@acme.example", "zoe@acme.example"} {
		if _, err := v.Verify(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// The usage rows of delivered results are written a moment after their answers.
	seen := func(raw string, e string) bool {
		return strings.Contains(raw, `"email": "`+e+`"`) || strings.Contains(raw, `"email":"`+e+`"`)
	}
	var raw string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, d := export(t, m)
		raw = r
		if d.Account.AccountID != acct.AccountID || len(d.Keys) < 2 || len(d.Truncated) != 0 {
			t.Fatalf("export: %s", r)
		}
		if seen(r, "ann@acme.example") && seen(r, "zoe@acme.example") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export never showed both results: %s", r)
		}
	}
	if strings.Contains(raw, "key_hash") || strings.Contains(raw, "password_hash") {
		t.Errorf("the export carries hashes: %s", raw)
	}

	d, err := v.DeleteHistory(ctx, " ANN@acme.example ")
	if err != nil || d.Email != "ann@acme.example" || d.Deleted.Results < 1 {
		t.Fatalf("DeleteHistory = %+v, %v", d, err)
	}
	raw, _ = export(t, m)
	if seen(raw, "ann@acme.example") || !seen(raw, "zoe@acme.example") {
		t.Errorf("after DeleteHistory the export is %s", raw)
	}
	var e *client.Error
	if _, err := v.DeleteHistory(ctx, "no-at-sign"); !errors.As(err, &e) || e.Status != 400 || e.Code != client.CodeInvalidRequest {
		t.Errorf("DeleteHistory of no address: %v", err)
	}

	if err := m.DeleteAccount(ctx, "not-the-id"); !errors.As(err, &e) || e.Status != 400 || e.Code != client.CodeInvalidRequest {
		t.Fatalf("DeleteAccount with a wrong confirmation: %v", err)
	}
	if _, err := m.Account(ctx); err != nil {
		t.Fatalf("a refused deletion deleted the account: %v", err)
	}
	if err := m.DeleteAccount(ctx, acct.AccountID); err != nil {
		t.Fatalf("DeleteAccount: %v", err)
	}
	for name, c := range map[string]*client.Client{"provisioning": m, "standard": v} {
		if _, err := c.Account(ctx); !errors.As(err, &e) || e.Status != 401 {
			t.Errorf("the %s key after the deletion: %v", name, err)
		}
	}
}
