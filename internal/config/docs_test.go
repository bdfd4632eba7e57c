package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readVariables returns every variable Load asks for, for every role, with and without -dev.
func readVariables() map[string]bool {
	names := map[string]bool{}
	for _, role := range []Role{RoleAPI, RoleVerifier, RoleWebhook} {
		for _, dev := range []bool{false, true} {
			_, _ = Load(role, dev, func(name string) string {
				names[name] = true
				if name == "MAILVET_DNS_RESOLVER" {
					return "127.0.0.1:53" // so that Load does not read /etc/resolv.conf
				}
				return ""
			})
		}
	}
	return names
}

// goVariables are read by Go's standard library, not by Load; the table documents them too.
var goVariables = []string{"SSL_CERT_FILE", "SSL_CERT_DIR"}

// documentedVariables returns the variables named in the first column of docs/operations.md's
// "Configuration" table. A cell that abbreviates (`MAILVET_PLAN_FREE_MAX_KEYS`, `…_BUILDER_…`)
// names the first variable with its tier replaced.
func documentedVariables(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Configuration" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*|…_[A-Z]+_…)`")
	out := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		first := ""
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			n := m[1]
			if tier, ok := strings.CutPrefix(n, "…_"); ok {
				tier = strings.TrimSuffix(tier, "_…")
				if !strings.Contains(first, "_FREE_") {
					t.Fatalf("%q: an abbreviation follows a name without a tier", cell)
				}
				n = strings.Replace(first, "_FREE_", "_"+tier+"_", 1)
			} else if first == "" {
				first = n
			}
			out[n] = true
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d variables in the Configuration table: %v", len(out), out)
	}
	return out
}

// Every variable the binaries read is in docs/operations.md's Configuration table, and every
// variable of the table is read, so that a setting cannot be added, renamed or dropped in the
// code without the operator's reference following.
func TestEveryVariableIsDocumented(t *testing.T) {
	t.Parallel()
	read, documented := readVariables(), documentedVariables(t)
	for _, n := range goVariables {
		read[n] = true
	}
	var missing, stale []string
	for n := range read {
		if !documented[n] {
			missing = append(missing, n)
		}
	}
	for n := range documented {
		if !read[n] {
			stale = append(stale, n)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	if len(missing) > 0 {
		t.Errorf("read but not in docs/operations.md's Configuration table: %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("in docs/operations.md's Configuration table but read by no binary: %v", stale)
	}
}
