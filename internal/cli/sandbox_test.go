package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// End-to-end against the real `api -dev -demo`: `keys create --sandbox` makes a sandbox key,
// `keys list` shows each key's mode, and `verify` with the sandbox key gets the documented magic
// answers (docs/sandbox.md), marked sandbox, while the live key gets the demo world's.
func TestSandboxKeyFromTheCLI(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, nil)
	mgmt := map[string]string{"MAILVET_API_KEY": s.ProvisioningKey, "MAILVET_URL": s.URL}

	code, stdout, stderr := run(t, mgmt, "", "keys", "create", "--sandbox", "--label", "ci")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var k client.CreatedKey
	if err := json.Unmarshal([]byte(stdout), &k); err != nil || k.Mode != client.ModeSandbox || !strings.HasPrefix(k.Key, "sk_test_") {
		t.Fatalf("create --sandbox: %s %v", stdout, err)
	}
	code, stdout, _ = run(t, mgmt, "", "keys", "list")
	var l client.KeyList
	if err := json.Unmarshal([]byte(stdout), &l); code != ExitOK || err != nil || l.Count != 2 {
		t.Fatalf("list: exit %d, %s", code, stdout)
	}
	modes := map[string]int{}
	for _, x := range l.Keys {
		modes[x.Mode]++
	}
	if modes[client.ModeLive] != 1 || modes[client.ModeSandbox] != 1 {
		t.Errorf("modes %v", modes)
	}

	sandbox := map[string]string{"MAILVET_API_KEY": k.Key, "MAILVET_URL": s.URL}
	want := [][3]string{
		{"mailbox_unknown@sandbox.mailvet.test", "undeliverable", "mailbox_unknown"},
		{"catch_all@sandbox.mailvet.test", "catch_all", "catch_all"},
		{"disposable@sandbox.mailvet.test", "invalid", "disposable"},
		{"ann@acme.example", "unknown", "sandbox_unlisted"}, // deliverable in the demo world, to a live key
	}
	args := []string{"verify", "--json"}
	for _, w := range want {
		args = append(args, w[0])
	}
	code, stdout, stderr = run(t, sandbox, "", args...)
	if code != ExitOK {
		t.Fatalf("verify: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != len(want) {
		t.Fatalf("verify output %q", stdout)
	}
	for i, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r["email"] != want[i][0] || r["status"] != want[i][1] || r["reason"] != want[i][2] || r["sandbox"] != true {
			t.Errorf("line %d: %s, want %v", i, line, want[i])
		}
	}
	live := map[string]string{"MAILVET_API_KEY": s.StandardKey, "MAILVET_URL": s.URL}
	code, stdout, _ = run(t, live, "", "verify", "--json", "ann@acme.example")
	if code != ExitOK || !strings.Contains(stdout, `"status":"deliverable"`) || strings.Contains(stdout, `"sandbox"`) {
		t.Errorf("live key: exit %d, %s", code, stdout)
	}
}
