package passwords

import (
	"strings"
	"testing"
)

// The embedded list is what gen writes: lower case, one a line, each once, and looked up whatever
// the case of the password.
func TestEmbeddedList(t *testing.T) {
	seen := map[string]bool{}
	for _, line := range strings.Split(embedded, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line != strings.ToLower(line) || seen[line] {
			t.Fatalf("entry %q is not lower case, or repeated", line)
		}
		seen[line] = true
	}
	if Len() != len(seen) || Len() < 40_000 {
		t.Fatalf("Len %d, %d entries in the file", Len(), len(seen))
	}
	for _, p := range []string{"password12", "PASSWORD12", "QwertyUiop", "1234567890"} {
		if !Common(p) {
			t.Errorf("%q is not found", p)
		}
	}
	if Common("correct horse battery staple 2026") || Common("") {
		t.Error("a passphrase, or nothing, is on the list")
	}
}
