package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// End-to-end against the real `api -dev -demo`: the audit log a page at a time, one address's
// history deleted, the export to a file and to standard output, and the account's deletion —
// refused without --confirm, with a wrong id and while a subscription is paid, then done. Each
// command given the other family's key says which key it needs.
func TestPersonalDataAgainstServer(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, nil)
	ctx := context.Background()
	std := map[string]string{"MAILVET_API_KEY": s.StandardKey, "MAILVET_URL": s.URL}
	mgmt := map[string]string{"MAILVET_API_KEY": s.ProvisioningKey, "MAILVET_URL": s.URL}

	// The account's id, which account delete wants typed out.
	code, stdout, stderr := run(t, mgmt, "", "account", "show")
	var acct client.Account
	if err := json.Unmarshal([]byte(stdout), &acct); code != ExitOK || err != nil || acct.AccountID == "" || acct.Tier != "free" {
		t.Fatalf("account show: exit %d, %s %s", code, stdout, stderr)
	}

	// A key created and revoked, then another created: three events, newest first, paged one at
	// a time (the free plan allows two keys, the demo's among them).
	for _, label := range []string{"audit-a", "audit-b"} {
		code, stdout, stderr := run(t, mgmt, "", "keys", "create", "--label", label)
		var k client.CreatedKey
		if err := json.Unmarshal([]byte(stdout), &k); code != ExitOK || err != nil {
			t.Fatalf("keys create: %s", stderr)
		}
		if label == "audit-a" {
			if code, _, stderr := run(t, mgmt, "", "keys", "revoke", k.ID); code != ExitOK {
				t.Fatalf("keys revoke: %s", stderr)
			}
		}
	}
	var kinds []string
	cursor := ""
	for range 10 {
		args := []string{"audit", "--limit", "1"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		code, stdout, stderr := run(t, mgmt, "", args...)
		var p client.AuditPage
		if err := json.Unmarshal([]byte(stdout), &p); code != ExitOK || err != nil || len(p.Events) != 1 {
			t.Fatalf("%q: exit %d, %s %s", args, code, stdout, stderr)
		}
		kinds = append(kinds, p.Events[0].Kind+" "+p.Events[0].Detail)
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(kinds) < 3 || !strings.HasPrefix(kinds[0], "key_created") || !strings.Contains(kinds[0], "audit-b") ||
		!strings.HasPrefix(kinds[1], "key_revoked") || !strings.Contains(kinds[1], "audit-a") ||
		!strings.HasPrefix(kinds[2], "key_created") || !strings.Contains(kinds[2], "audit-a") {
		t.Errorf("audit pages, newest first: %q", kinds)
	}
	if code, _, stderr := run(t, mgmt, "", "audit", "--limit", "500"); code != ExitError || !strings.Contains(stderr, "from 1 to 200") {
		t.Errorf("audit --limit 500: exit %d, %s", code, stderr)
	}
	if code, _, stderr := run(t, mgmt, "", "audit", "--cursor", "nonsense"); code != ExitError || !strings.Contains(stderr, "invalid_request (HTTP 400)") {
		t.Errorf("audit --cursor nonsense: exit %d, %s", code, stderr)
	}

	// One address's history: its results are in the export until history delete removes them.
	if code, _, stderr := run(t, std, "", "verify", "ann@acme.example", "zoe@acme.example"); code != ExitOK {
		t.Fatalf("verify: %s", stderr)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "export.json")
	var export struct {
		Account struct {
			AccountID string `json:"account_id"`
		} `json:"account"`
		Results []struct {
			Result struct{ Email string } `json:"result"`
		} `json:"results"`
	}
	emails := func() map[string]bool {
		m := map[string]bool{}
		for _, r := range export.Results {
			m[r.Result.Email] = true
		}
		return m
	}
	// The usage rows of delivered results are written a moment after their answers.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, stdout, stderr := run(t, mgmt, "", "account", "export", "--out", out)
		b, _ := os.ReadFile(out)
		if code != ExitOK || stdout != "" || json.Unmarshal(b, &export) != nil || export.Account.AccountID != acct.AccountID {
			t.Fatalf("account export --out: exit %d, %s %s\n%s", code, stdout, stderr, b)
		}
		if e := emails(); e["ann@acme.example"] && e["zoe@acme.example"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export never showed both results: %s", b)
		}
	}
	code, stdout, stderr = run(t, std, "", "history", "delete", " ANN@acme.example ")
	var d client.HistoryDeleted
	if err := json.Unmarshal([]byte(stdout), &d); code != ExitOK || err != nil || d.Email != "ann@acme.example" || d.Deleted.Results < 1 {
		t.Fatalf("history delete: exit %d, %s %s", code, stdout, stderr)
	}
	// To standard output, the export is the same document.
	code, stdout, stderr = run(t, mgmt, "", "account", "export")
	if code != ExitOK || json.Unmarshal([]byte(stdout), &export) != nil {
		t.Fatalf("account export: exit %d, %s", code, stderr)
	}
	if e := emails(); e["ann@acme.example"] || !e["zoe@acme.example"] {
		t.Errorf("after history delete the export has %v", e)
	}
	if code, _, stderr := run(t, std, "", "history", "delete", "no-at-sign"); code != ExitError || !strings.Contains(stderr, "invalid_request (HTTP 400)") {
		t.Errorf("history delete of no address: exit %d, %s", code, stderr)
	}

	// The wrong key family: the refusal says which key the command needs, and an export that
	// failed leaves the file it would have replaced as it was, with no temporary file beside it.
	before, _ := os.ReadFile(out)
	for _, c := range []struct {
		env  map[string]string
		args []string
		says string
	}{
		{mgmt, []string{"history", "delete", "ann@acme.example"}, "history delete needs a standard key (sk_live_…, or sandbox sk_test_…) in MAILVET_API_KEY"},
		{std, []string{"account", "export", "--out", out}, "account export needs a provisioning key (sk_mgmt_…) in MAILVET_API_KEY"},
		{std, []string{"audit"}, "audit needs a provisioning key (sk_mgmt_…) in MAILVET_API_KEY"},
		{std, []string{"account", "show"}, "account show needs a provisioning key"},
		{std, []string{"account", "delete", "--confirm", acct.AccountID}, "account " + acct.AccountID + " was not deleted: account delete needs a provisioning key"},
	} {
		code, _, stderr := run(t, c.env, "", c.args...)
		if code != ExitError || !strings.HasPrefix(stderr, "mailvet: "+c.says) || !strings.Contains(stderr, "wrong_key_type (HTTP 403)") {
			t.Errorf("%q: exit %d, %s", c.args, code, stderr)
		}
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(after, before) {
		t.Errorf("a failed export changed the --out file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files beside the export, want it alone: %v", len(entries), entries)
	}

	// account delete: never without --confirm; a wrong id and a paid subscription delete nothing.
	if code, _, stderr := run(t, mgmt, "", "account", "delete"); code != ExitUsage || !strings.Contains(stderr, "--confirm ACCOUNT_ID") {
		t.Errorf("account delete without --confirm: exit %d, %s", code, stderr)
	}
	code, _, stderr = run(t, mgmt, "", "account", "delete", "--confirm", "not-the-id")
	if code != ExitError || !strings.HasPrefix(stderr, "mailvet: account not-the-id was not deleted: Field confirm must be this account's id") {
		t.Errorf("account delete with a wrong id: exit %d, %s", code, stderr)
	}
	db, err := pgx.Connect(ctx, s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `UPDATE accounts SET tier = 'builder', subscription_status = 'active' WHERE id = $1`, acct.AccountID); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, mgmt, "", "account", "delete", "--confirm", acct.AccountID)
	if want := "mailvet: account " + acct.AccountID + " was not deleted: The account pays for an active Stripe subscription; it cannot be deleted while the subscription runs.\n" +
		"  What to do: Cancel the subscription in the billing portal"; code != ExitError || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "subscription_active (HTTP 409)") {
		t.Errorf("account delete of a paying account: exit %d, %s\nwant it to start %s", code, stderr, want)
	}
	if code, _, stderr := run(t, mgmt, "", "account", "show"); code != ExitOK {
		t.Fatalf("a refused deletion deleted the account: %s", stderr)
	}
	if _, err := db.Exec(ctx, `UPDATE accounts SET tier = 'free', subscription_status = 'canceled' WHERE id = $1`, acct.AccountID); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run(t, mgmt, "", "account", "delete", "--confirm", acct.AccountID)
	if code != ExitOK || !strings.Contains(stdout, `"deleted":true`) {
		t.Fatalf("account delete: exit %d, %s %s", code, stdout, stderr)
	}
	for name, env := range map[string]map[string]string{"provisioning": mgmt, "standard": std} {
		if code, _, stderr := run(t, env, "", "audit"); code != ExitError || !strings.Contains(stderr, "invalid_api_key (HTTP 401)") {
			t.Errorf("the %s key after the deletion: exit %d, %s", name, code, stderr)
		}
	}
}

// The personal-data commands' mistakes are usage errors, before any request.
func TestPersonalDataUsageErrors(t *testing.T) {
	t.Parallel()
	key := map[string]string{"MAILVET_API_KEY": "sk_mgmt_x", "MAILVET_URL": "http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"account"}, {"account", "frob"}, {"account", "--json"}, {"account", "show", "extra"},
		{"account", "show", "--out", "x.json"}, {"account", "export", "--confirm", "x"}, {"account", "export", "--json"},
		{"account", "delete"}, {"account", "delete", "--confirm", " "}, {"account", "delete", "x"},
		{"history"}, {"history", "show", "a@b.example"}, {"history", "delete"}, {"history", "delete", "a@b.example", "c@d.example"},
		{"audit", "extra"}, {"audit", "--limit", "x"},
	} {
		if code, _, stderr := run(t, key, "", args...); code != ExitUsage || !strings.Contains(stderr, "mailvet help") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"account", "-h"}, []string{"mailvet account export [--out FILE]", "mailvet account delete --confirm ACCOUNT_ID", "--confirm ID", "--out string"}},
		{[]string{"account", "delete", "--help"}, []string{"cannot be undone", "--confirm ID"}},
		{[]string{"history", "delete", "-h"}, []string{"mailvet history delete EMAIL", "takes a standard key"}},
		{[]string{"audit", "-h"}, []string{"mailvet audit [--limit N] [--cursor C]", "--limit int", "--cursor string"}},
	} {
		code, stdout, stderr := run(t, nil, "", tc.args...)
		if code != ExitOK || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, stderr)
		}
		for _, want := range tc.want {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: help lacks %q:\n%s", tc.args, want, stdout)
			}
		}
	}
}

// The audit table shows an actor or detail with a control character as an escape, and the
// command for the next page.
func TestAuditTable(t *testing.T) {
	t.Parallel()
	ip := "192.0.2.7"
	var out bytes.Buffer
	page := client.AuditPage{NextCursor: "c2", Events: []client.AuditEvent{
		{At: time.Date(2026, 11, 29, 6, 40, 0, 0, time.UTC), Kind: "signin", Outcome: "failure", ActorType: "dashboard_user",
			Actor: "ann@acme.example\x1b[31m", ClientIP: &ip, Detail: "wrong password"},
		{At: time.Date(2026, 11, 29, 6, 39, 0, 0, time.UTC), Kind: "plan_changed", Outcome: "success", ActorType: "system",
			Actor: "stripe", Detail: "plan free → builder"},
	}}
	writeAudit(&out, page, 0)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "AT") || strings.Contains(out.String(), "\x1b") ||
		!strings.Contains(lines[1], `ann@acme.example\u001b[31m`) || !strings.Contains(lines[1], "192.0.2.7") ||
		!strings.Contains(lines[2], "stripe") || !strings.Contains(lines[2], " - ") || lines[3] != "more: mailvet audit --cursor c2" {
		t.Fatalf("audit table:\n%s", out.String())
	}
	out.Reset()
	writeAudit(&out, page, 2)
	if !strings.HasSuffix(out.String(), "\nmore: mailvet audit --limit 2 --cursor c2\n") {
		t.Errorf("the next page keeps the page size:\n%s", out.String())
	}
	if got := count(0, "delivery") + ", " + count(1, "job") + ", " + count(3, "list row"); got != "0 deliveries, 1 job, 3 list rows" {
		t.Errorf("count: %q", got)
	}
}
