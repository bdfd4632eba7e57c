// Package syntax is layer 1 of the verification pipeline: it decides whether a string is an
// RFC 5321 mailbox (or an RFC 6531 one, with a UTF-8 local part) that Mailvet will go on to
// verify, and returns it split into a local part and an ASCII, lowercased domain that every later
// layer works with.
//
// The rules are the ones of docs/architecture.md, "1. Syntax". They are deliberately stricter than RFC 5322:
// quoted local parts, comments and address literals are legal but practically never real
// mailboxes, and accepting them would only make the later layers (and callers) handle oddities.
package syntax

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// RFC 5321 §4.5.3.1 limits, and the 254-octet path limit that follows from the 256-octet
// forward-path minus its angle brackets (RFC 5321 erratum 1690).
const (
	maxLocal   = 64
	maxAddress = 254
	maxDomain  = 253
	maxLabel   = 63

	// maxInput is four UTF-8 octets for each of the 254 characters a mailbox may have.
	maxInput = 4 * maxAddress
)

// ErrInvalid is wrapped by every error Parse returns, so that callers can tell a syntax failure
// from anything else with errors.Is.
var ErrInvalid = errors.New("invalid address")

// reasonError is a syntax failure with its reason in plain words. The reasons are package-level
// values so that rejecting an address, which the API does for a large share of junk input, does
// not allocate.
type reasonError struct{ reason string }

func (e *reasonError) Error() string { return "invalid address: " + e.reason }
func (e *reasonError) Unwrap() error { return ErrInvalid }

func reason(s string) error { return &reasonError{s} }

var (
	errEmpty           = reason("the address is empty")
	errLineBreak       = reason("the address has a line break (CR or LF) in it")
	errNoAt            = reason("there is no @ between local part and domain")
	errLocalEmpty      = reason("the local part (before @) is empty")
	errLocalTooLong    = reason("the local part is longer than 64 octets")
	errLocalUTF8       = reason("the local part is not valid UTF-8")
	errLocalUnsafe     = reason("the local part has an invisible, control, space or unassigned character")
	errLocalQuoted     = reason("quoted local parts are not accepted")
	errComment         = reason("comments in parentheses are not accepted")
	errLocalChar       = reason("the local part has a character that is not allowed in an unquoted local part")
	errMultipleAt      = reason("there is more than one @ (quoted local parts are not accepted)")
	errLocalDotEdge    = reason("the local part starts or ends with a dot")
	errLocalDotDot     = reason("the local part has two dots in a row")
	errDomainEmpty     = reason("the domain (after @) is empty")
	errIPLiteral       = reason("IP address literals are not accepted as a domain")
	errDomainIDNA      = reason("the domain is not a valid internationalised domain name")
	errDomainTooLong   = reason("the domain is longer than 253 octets")
	errAddressTooLong  = reason("the address is longer than 254 octets")
	errDomainDotEdge   = reason("the domain starts or ends with a dot")
	errLabelEmpty      = reason("the domain has an empty label (two dots in a row)")
	errLabelTooLong    = reason("a domain label is longer than 63 octets")
	errLabelChar       = reason("a domain label has a character other than a letter, digit or hyphen")
	errLabelHyphenEdge = reason("a domain label starts or ends with a hyphen")
	errLabelHyphens34  = reason("a domain label has hyphens in its third and fourth positions, which IDNA reserves for xn-- labels")
	errSingleLabel     = reason("the domain has a single label; at least two are needed")
	errTLD             = reason("the top-level domain is neither alphabetic nor an xn-- label")
)

// Address is a mailbox that passed layer 1.
type Address struct {
	// Local is the local part as given, in Unicode normalisation form C when it is UTF-8
	// (RFC 6532 §3.1). It is not lowercased, because RFC 5321 leaves its case significance to
	// the receiving server.
	Local string
	// Domain is the domain in ASCII (A-labels for internationalised names), lowercased.
	Domain string
}

// String returns the address in the form every later layer and the result use.
func (a Address) String() string { return a.Local + "@" + a.Domain }

// UTF8Local reports whether the local part has non-ASCII characters: such a mailbox can only be
// named to a server that offers SMTPUTF8 (RFC 6531).
func (a Address) UTF8Local() bool { return !isASCII(a.Local) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// atext marks the characters RFC 5322 §3.2.3 allows in an unquoted (dot-atom) local part, apart
// from the dot, which has its own rules.
var atext = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-/=?^_`{|}~" {
		t[c] = true
	}
	return t
}()

// Parse trims the spaces and tabs around raw and checks it against the rules of layer 1. On
// success the domain is ASCII and lowercased, and a UTF-8 local part is in NFC; on failure the
// error wraps ErrInvalid and says why in plain words.
//
// A CR or LF anywhere is refused rather than trimmed: a line break is never part of a mailbox,
// and input that carries one was cut out of something else (docs/architecture.md, "1. Syntax").
//
// The common case — an ASCII address — is checked in one pass without allocating (unless the
// domain has upper-case letters); only UTF-8 local parts, internationalised domains and xn--
// labels go through Unicode normalisation or UTS-46 processing.
func Parse(raw string) (Address, error) {
	if strings.ContainsAny(raw, "\r\n") {
		return Address{}, errLineBreak
	}
	s := strings.Trim(raw, " \t")
	if s == "" {
		return Address{}, errEmpty
	}
	// No valid address comes near this length even in Unicode form; refusing early bounds the
	// work (UTS-46 mapping in particular) that hostile input can cause.
	if len(s) > maxInput {
		return Address{}, errAddressTooLong
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return Address{}, errNoAt
	}
	local, domain := s[:at], s[at+1:]
	local, err := checkLocal(local)
	if err != nil {
		return Address{}, err
	}
	domain, err = normalizeDomain(domain)
	if err != nil {
		return Address{}, err
	}
	if len(local)+1+len(domain) > maxAddress {
		return Address{}, errAddressTooLong
	}
	return Address{Local: local, Domain: domain}, nil
}

// checkLocal enforces the dot-atom rules on the local part and returns it, normalised to NFC
// when it has UTF-8 characters (RFC 6531's UTF8-non-ascii are atext like the ASCII ones).
func checkLocal(local string) (string, error) {
	if local == "" {
		return "", errLocalEmpty
	}
	if !isASCII(local) {
		if !utf8.ValidString(local) {
			return "", errLocalUTF8
		}
		// NFC first, so that the checks and the 64-octet limit apply to the spelling that is
		// sent and reported.
		local = norm.NFC.String(local)
	}
	// The character checks come before the length check so that a long quoted local part is
	// rejected for what it is, which is the more useful reason.
	prevDot := false
	for i := 0; i < len(local); {
		c := local[i]
		switch {
		case c == '.':
			if i == 0 || i == len(local)-1 {
				return "", errLocalDotEdge
			}
			if prevDot {
				return "", errLocalDotDot
			}
			prevDot = true
			i++
			continue
		case atext[c]:
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(local[i:])
			if !localRune(r, i == 0 || prevDot) {
				return "", errLocalUnsafe
			}
			prevDot = false
			i += n
			continue
		case c == '@':
			return "", errMultipleAt
		case c == '"':
			return "", errLocalQuoted
		case c == '(' || c == ')':
			return "", errComment
		default:
			return "", errLocalChar
		}
		prevDot = false
		i++
	}
	if len(local) > maxLocal {
		return "", errLocalTooLong
	}
	return local, nil
}

// localRune reports whether the non-ASCII rune r may stand in a local part: a letter, digit,
// punctuation or symbol, or a combining mark that follows one. Spaces, line and paragraph
// separators, controls, format characters (zero-width and bidirectional controls), private-use
// and unassigned code points are refused: they are invisible or render as nothing, so an address
// with one cannot be told from one without it.
func localRune(r rune, first bool) bool {
	switch {
	case unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S):
		return true
	case unicode.Is(unicode.M, r):
		return !first
	}
	return false
}

// normalizeDomain returns the ASCII, lowercased form of domain after checking it.
func normalizeDomain(domain string) (string, error) {
	if domain == "" {
		return "", errDomainEmpty
	}
	if domain[0] == '[' {
		return "", errIPLiteral
	}
	if strings.IndexByte(domain, '(') >= 0 || strings.IndexByte(domain, ')') >= 0 {
		return "", errComment
	}
	if needsIDNA(domain) {
		// Invalid UTF-8 would be mapped to U+FFFD and encoded, turning garbage into a
		// plausible A-label, so it is refused before conversion.
		if !utf8.ValidString(domain) {
			return "", errDomainIDNA
		}
		// Empty labels are judged on the input, because conversion can make them (an empty
		// "xn--" label decodes to nothing) and the reason should then name IDNA.
		if domain[0] == '.' || domain[len(domain)-1] == '.' {
			return "", errDomainDotEdge
		}
		if strings.Contains(domain, "..") {
			return "", errLabelEmpty
		}
		// UTS-46 lookup processing maps (lowercases, normalises, turns ideographic full stops
		// into dots), validates and converts to A-labels. It also validates existing xn--
		// labels, so that a bogus Punycode label cannot pass as an internationalised name.
		a, err := idna.Lookup.ToASCII(domain)
		if err != nil || a == "" {
			return "", errDomainIDNA
		}
		if err := checkDomain(a); err != nil {
			if err == errDomainDotEdge || err == errLabelEmpty {
				return "", errDomainIDNA
			}
			return "", err
		}
		return a, nil
	}
	if hasUpper(domain) {
		domain = strings.ToLower(domain)
	}
	if err := checkDomain(domain); err != nil {
		return "", err
	}
	return domain, nil
}

// needsIDNA reports whether domain has non-ASCII bytes or an xn-- label, the two cases the
// fast ASCII path cannot judge on its own.
func needsIDNA(domain string) bool {
	for i := 0; i < len(domain); i++ {
		c := domain[i]
		if c >= 0x80 {
			return true
		}
		if (i == 0 || domain[i-1] == '.') && len(domain)-i >= 4 &&
			lower(c) == 'x' && lower(domain[i+1]) == 'n' && domain[i+2] == '-' && domain[i+3] == '-' {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// checkDomain enforces the LDH, length and label-count rules on an ASCII, lowercased domain.
func checkDomain(domain string) error {
	if len(domain) > maxDomain {
		return errDomainTooLong
	}
	if domain[0] == '.' || domain[len(domain)-1] == '.' {
		return errDomainDotEdge
	}
	labels := 0
	start := 0
	for i := 0; i <= len(domain); i++ {
		if i < len(domain) && domain[i] != '.' {
			c := domain[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return errLabelChar
			}
			continue
		}
		label := domain[start:i]
		switch {
		case label == "":
			return errLabelEmpty
		case len(label) > maxLabel:
			return errLabelTooLong
		case label[0] == '-' || label[len(label)-1] == '-':
			return errLabelHyphenEdge
		case len(label) >= 4 && label[2] == '-' && label[3] == '-' && label[:2] != "xn":
			// IDNA (RFC 5891 §4.2.3.1) reserves "--" in the third and fourth positions for
			// tagged labels, of which xn-- is the only one in use.
			return errLabelHyphens34
		}
		labels++
		start = i + 1
	}
	if labels < 2 {
		return errSingleLabel
	}
	if !validTLD(domain[strings.LastIndexByte(domain, '.')+1:]) {
		return errTLD
	}
	return nil
}

// validTLD accepts an alphabetic top-level label or an A-label: no delegated TLD has digits
// except the xn-- ones, so a numeric "TLD" almost always means an IP address typed as a domain.
func validTLD(tld string) bool {
	if strings.HasPrefix(tld, "xn--") {
		return true
	}
	for i := 0; i < len(tld); i++ {
		if tld[i] < 'a' || tld[i] > 'z' {
			return false
		}
	}
	return true
}
