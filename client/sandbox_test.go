package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// magicRE reads a row of docs/sandbox.md's table of magic addresses: address, status, reason.
var magicRE = regexp.MustCompile("^\\| `([^`]+@sandbox\\.mailvet\\.test)` \\| `([a-z_]+)` \\| `([a-z_0-9]+)` \\|")

func documentedMagic(t *testing.T) map[string][2]string {
	t.Helper()
	raw, err := os.ReadFile("../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if m := magicRE.FindStringSubmatch(line); m != nil {
			out[m[1]] = [2]string{m[2], m[3]}
		}
	}
	if len(out) < 20 {
		t.Fatalf("docs/sandbox.md lists %d magic addresses", len(out))
	}
	return out
}

// TestE2ESandboxKey: against the real `api -dev -demo` binary, the client creates a sandbox key
// (CreateKeyWithMode), gets every documented magic answer through Verify, VerifyBatch and a
// bulk list, each marked Sandbox, and the account's usage does not move.
func TestE2ESandboxKey(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, map[string]string{"MAILVET_PLAN_FREE_MAX_KEYS": "5"})
	ctx := context.Background()
	mgmt := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL), client.WithTimeout(30*time.Second))
	before, err := mgmt.Account(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, err := mgmt.CreateKeyWithMode(ctx, "ci", client.ModeSandbox)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Key, "sk_test_") || k.Mode != client.ModeSandbox {
		t.Fatalf("created %+v", k)
	}
	keys, err := mgmt.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, x := range keys.Keys {
		modes[x.ID] = x.Mode
	}
	if modes[k.ID] != client.ModeSandbox || len(modes) != 2 {
		t.Errorf("keys %+v", keys)
	}

	c := client.New(k.Key, client.WithBaseURL(s.URL), client.WithTimeout(30*time.Second))
	magic := documentedMagic(t)
	var emails []string
	for email, want := range magic {
		emails = append(emails, email)
		r, err := c.Verify(ctx, email)
		if err != nil {
			t.Fatalf("%s: %v", email, err)
		}
		if r.Status != want[0] || r.Reason != want[1] || !r.Sandbox {
			t.Errorf("%s: %+v, want %v", email, r, want)
		}
	}
	all, err := c.VerifyBatch(ctx, emails)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range all {
		if want := magic[emails[i]]; r.Email != emails[i] || r.Status != want[0] || r.Reason != want[1] || !r.Sandbox {
			t.Errorf("batch %s: %+v, want %v", emails[i], r, want)
		}
	}

	l, err := c.UploadList(ctx, strings.NewReader(strings.Join(emails, "\n")+"\n"), client.ListUpload{Format: client.ListText, Name: "sandbox"})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Sandbox {
		t.Errorf("upload %+v", l)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := c.WaitList(wctx, l.ID, 50*time.Millisecond, nil)
	if err != nil || done.State != "completed" || done.Verified != len(emails) {
		t.Fatalf("WaitList = %+v, %v", done, err)
	}
	rc, err := c.ListResults(ctx, l.ID, client.ResultsOptions{Format: "ndjson"})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	n := 0
	for sc.Scan() {
		var row struct {
			Email  string        `json:"email"`
			Result client.Result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		n++
		if want := magic[row.Email]; row.Result.Status != want[0] || row.Result.Reason != want[1] || !row.Result.Sandbox {
			t.Errorf("list %s: %+v, want %v", row.Email, row.Result, want)
		}
	}
	if n != len(emails) {
		t.Errorf("%d result rows for %d addresses", n, len(emails))
	}

	after, err := mgmt.Account(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.UsageThisMonth != before.UsageThisMonth {
		t.Errorf("usage_this_month moved from %d to %d", before.UsageThisMonth, after.UsageThisMonth)
	}
}
