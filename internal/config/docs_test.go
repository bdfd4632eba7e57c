package config

import (
	"os"
	"reflect"
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

// documentedDefaults returns the defaults of docs/operations.md's Configuration table that are
// plain values: a default cell of backticked values only (`720h`, or `500`, `5000`, `100000` for a
// row of three variables), optionally followed by a parenthesis. Cells that describe their
// default in words, or differ with -dev, are left to the reader.
func documentedDefaults(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Configuration\n")
	section, _, _ = strings.Cut(section, "\n## ")
	plain := regexp.MustCompile("^`([^`]+)`(?:, `[^`]+`)*(?: \\([^)]*\\))?$")
	value := regexp.MustCompile("`([^`]+)`")
	out := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		def := strings.TrimSpace(cells[2])
		if !plain.MatchString(def) {
			continue
		}
		def, _, _ = strings.Cut(def, " (")
		var names []string
		first := ""
		for _, m := range value.FindAllStringSubmatch(cells[1], -1) {
			n := m[1]
			if tier, ok := strings.CutPrefix(n, "…_"); ok {
				n = strings.Replace(first, "_FREE_", "_"+strings.TrimSuffix(tier, "_…")+"_", 1)
			} else if first == "" {
				first = n
			}
			names = append(names, n)
		}
		values := value.FindAllStringSubmatch(def, -1)
		if len(values) != len(names) {
			t.Errorf("operations.md: %d variables but %d defaults in %q", len(names), len(values), line)
			continue
		}
		for i, n := range names {
			out[n] = values[i][1]
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d plain defaults in the Configuration table: %v", len(out), out)
	}
	return out
}

// Every plain default of docs/operations.md's Configuration table is the default: setting the
// variable to the documented value loads the same configuration as leaving it unset, for every
// role that reads it, with and without -dev.
func TestDocumentedDefaultsAreTheDefaults(t *testing.T) {
	t.Parallel()
	base := func(name string) string {
		if name == "MAILVET_DNS_RESOLVER" {
			return "127.0.0.1:53" // so that Load does not read /etc/resolv.conf
		}
		return ""
	}
	for name, def := range documentedDefaults(t) {
		if slices.Contains(goVariables, name) || strings.Contains(def, "<") {
			continue // Go's own variables; a default that names another variable's value
		}
		for _, role := range []Role{RoleAPI, RoleVerifier, RoleWebhook} {
			for _, dev := range []bool{false, true} {
				reads := false
				unset, err := Load(role, dev, func(n string) string {
					reads = reads || n == name
					return base(n)
				})
				if err != nil {
					t.Fatalf("Load(%v, dev=%v) with nothing set: %v", role, dev, err)
				}
				if !reads {
					continue
				}
				set, err := Load(role, dev, func(n string) string {
					if n == name {
						return def
					}
					return base(n)
				})
				if err != nil {
					t.Errorf("%s=%s (its documented default): role %v, dev=%v: %v", name, def, role, dev, err)
					continue
				}
				if !reflect.DeepEqual(set, unset) {
					t.Errorf("%s: the documented default %q is not the default (role %v, dev=%v)", name, def, role, dev)
				}
			}
		}
	}
}
