// Package safetext is the one rule for text that people name things with (key labels, list
// names) and that reaches terminals and pages as it is: no control characters (a line break or
// a tab breaks a table, an escape sequence drives a terminal) and no bidirectional controls (a
// right-to-left override makes "exe.gpj" read as "jpg.exe").
package safetext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// IsBidiControl reports whether r reorders the text around it (U+202A–U+202E, U+2066–U+2069,
// the marks).
func IsBidiControl(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }

// Unsafe reports whether r may not reach a terminal or a page as itself.
func Unsafe(r rune) bool { return unicode.IsControl(r) || IsBidiControl(r) }

// Escape is s with every Unsafe rune written as a \u escape, for showing text stored before it
// was checked.
func Escape(s string) string {
	if strings.IndexFunc(s, Unsafe) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if Unsafe(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Strip is s without its Unsafe runes.
func Strip(s string) string {
	return strings.Map(func(r rune) rune {
		if Unsafe(r) {
			return -1
		}
		return r
	}, s)
}

// QuoteMax is how much of a value from a request an error message quotes (docs/errors.md).
const QuoteMax = 64

// Cut is s as an error message quotes it: whole up to QuoteMax bytes, else its first QuoteMax
// bytes, cut back to the start of a character, and "…". A request's value can be as long as
// the request, and a message that echoed it whole could be megabytes.
func Cut(s string) string {
	if len(s) <= QuoteMax {
		return s
	}
	cut := QuoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
