package dnsname

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"acme.example": true, "xn--bcher-kva.example": true, "a-b.c0": true, "test": true,
		strings.Repeat("a", 63) + ".example": true,
		"":                                   false, "acme..example": false, ".acme": false, "acme.": false, "-a.example": false, "a-.example": false,
		"a_b.example": false, "ACME.example": false, "a b.example": false, "*.example": false,
		strings.Repeat("a", 64) + ".example": false, strings.Repeat("a.", 127) + "ab": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}
