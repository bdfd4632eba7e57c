package privacy

import (
	"strings"
	"testing"
	"unicode"
)

// The SQL comparison trims what strings.TrimSpace trims and lowers what strings.ToLower lowers
// (list.Normalize): spaces holds every space, and lowering maps every character that lowers to
// a character of the forms, the characters that need no table (Kelvin sign, dotted İ) included.
func TestNormalizedInSQLIsListNormalize(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) != strings.ContainsRune(spaces, r) {
			t.Errorf("spaces and unicode.IsSpace disagree on %U", r)
		}
	}
	forms := addressForms("kim.ibo@exemple.fr")
	from, to := lowering(forms)
	f, tt := []rune(from), []rune(to)
	if len(f) != len(tt) {
		t.Fatalf("lowering: from has %d characters, to %d", len(f), len(tt))
	}
	got := map[rune]rune{}
	for i := range f {
		got[f[i]] = tt[i]
	}
	for _, c := range []struct{ upper, lower rune }{{'K', 'k'}, {'\u212a', 'k'}, {'I', 'i'}, {'\u0130', 'i'}, {'É', 'é'}} {
		if c.lower == 'é' {
			if _, ok := got[c.upper]; ok {
				t.Errorf("lowering maps %c, whose lower case is in no form", c.upper)
			}
			continue
		}
		if got[c.upper] != c.lower {
			t.Errorf("lowering maps %U to %U; want %U", c.upper, got[c.upper], c.lower)
		}
	}
}
