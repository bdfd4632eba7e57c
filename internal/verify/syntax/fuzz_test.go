package syntax

import (
	"errors"
	"testing"
)

// FuzzParse checks the two properties every caller relies on: Parse never panics, and a valid
// address is a fixed point — parsing its String form gives the same Address back, so that the
// API, the workers and stored results all agree on one spelling. The seed corpus is the table of
// TestParse plus the files in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases() {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := Parse(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", raw, err)
			}
			return
		}
		if len(a.String()) > maxAddress || len(a.Local) > maxLocal || len(a.Domain) > maxDomain {
			t.Fatalf("Parse(%q) = %q exceeds a length limit", raw, a)
		}
		for i := 0; i < len(a.Domain); i++ {
			if c := a.Domain[i]; c >= 0x80 || ('A' <= c && c <= 'Z') {
				t.Fatalf("Parse(%q) domain %q is not lower-case ASCII", raw, a.Domain)
			}
		}
		b, err := Parse(a.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %q, but re-parsing it fails: %v", raw, a, err)
		}
		if b != a {
			t.Fatalf("Parse(%q) = %+v; re-parsing gives %+v", raw, a, b)
		}
	})
}
