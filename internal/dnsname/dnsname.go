// Package dnsname checks host names in the form DNS spells them: ASCII (IDNA A-labels), lower
// case, dot-separated labels.
package dnsname

import "strings"

// Valid reports whether s is one or more LDH labels (letters, digits and inner hyphens, 1–63
// characters: the host name syntax of RFC 1123, which IDNA lookup also enforces), at most 253
// characters in all. s must already be lower case; no trailing dot.
func Valid(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !Label(l) {
			return false
		}
	}
	return true
}

// Label reports whether l is one LDH label of 1–63 characters.
func Label(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
