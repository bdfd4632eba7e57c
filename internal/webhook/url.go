package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/mailvet/mailvet/internal/dnsname"
	"github.com/mailvet/mailvet/internal/safetext"
)

// MaxURLLength bounds a callback URL. Browsers and most servers stop around 2 KiB, and a longer
// URL is far more likely to be an attack on a log pipeline than a real endpoint.
const MaxURLLength = 2048

// ErrInvalidURL is wrapped by every error of CheckURL, so the API can map them all to a 400
// invalid_request naming webhook_url.
var ErrInvalidURL = errors.New("invalid webhook_url")

// URLError says which URL rule (docs/api.md, "URL rules") a URL broke.
type URLError struct {
	Rule   string // short name: "length", "syntax", "https", "userinfo", "host", "ip", "local", "port"
	Reason string // a sentence for the caller
}

func (e *URLError) Error() string { return "webhook_url: " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidURL) true.
func (e *URLError) Unwrap() error { return ErrInvalidURL }

func urlErr(rule, format string, args ...any) error {
	return &URLError{Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// Suffixes of names that only resolve inside a private network. Spec §6.3 names localhost and
// .local; .localhost is localhost by RFC 6761, and .internal and .localdomain are added because
// cloud metadata services (metadata.google.internal) and distribution defaults live there.
var localSuffixes = []string{"localhost", "local", "localdomain", "internal", "home.arpa"}

// CheckURL applies the URL rules (docs/api.md, "URL rules") to a callback URL: https only; the host is a
// hostname, never an IP address in any spelling (dotted, bracketed IPv6, or the decimal, hex and
// octal IPv4 forms that resolvers accept, like https://2130706433/); no userinfo; not localhost
// and not under .local. It also rejects URLs over MaxURLLength, single-label hosts (which resolve
// through search domains into private networks) and ports outside 1–65535. Any port is allowed,
// and so are queries and fragments (a fragment is never sent).
//
// CheckURL does no DNS look-up: the address a name resolves to is checked when the worker dials
// it, because only that check survives DNS rebinding.
func CheckURL(raw string) error {
	if raw == "" {
		return urlErr("syntax", "must not be empty")
	}
	if utf8.RuneCountInString(raw) > MaxURLLength {
		return urlErr("length", "must be at most %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return urlErr("syntax", "is not a valid URL")
	}
	if u.Scheme != "https" {
		return urlErr("https", "must use https")
	}
	if u.Opaque != "" {
		return urlErr("syntax", "must have the form https://host/path")
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return urlErr("userinfo", "must not contain a user name or password")
	}
	if strings.HasPrefix(u.Host, "[") {
		return urlErr("ip", "must name a host, not an IP address")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return urlErr("port", "port must be from 1 to 65535")
		}
	}
	host := u.Hostname()
	if host == "" {
		return urlErr("host", "must name a host")
	}
	return checkHost(host)
}

func checkHost(host string) error {
	ascii, err := HostName(host)
	if err != nil {
		return err
	}
	for _, s := range localSuffixes {
		if ascii == s || strings.HasSuffix(ascii, "."+s) {
			return urlErr("local", "host must not be localhost or a local-network name (.%s)", s)
		}
	}
	if !strings.Contains(ascii, ".") {
		return urlErr("host", "host %q must be a fully qualified domain name", safetext.Cut(host))
	}
	return nil
}

// HostName checks the host of a URL as CheckURL does, but for the rules on local-network and
// single-label names, which are the caller's: a valid DNS name of at most 253 characters, never
// an IP address in any spelling. It returns the name in lower-case ASCII (its punycode), without
// the trailing dot of the fully qualified spelling. Its errors are *URLError.
func HostName(host string) (string, error) {
	if _, err := netip.ParseAddr(host); err != nil && strings.ContainsAny(host, ":%") {
		return "", urlErr("host", "host %q is not a valid hostname", safetext.Cut(host))
	} else if err == nil {
		return "", urlErr("ip", "must name a host, not an IP address")
	}
	// One trailing dot is the fully qualified spelling of the same name.
	name := strings.TrimSuffix(host, ".")
	ascii, err := idna.Lookup.ToASCII(name)
	if err != nil || ascii == "" {
		return "", urlErr("host", "host %q is not a valid hostname", safetext.Cut(host))
	}
	ascii = strings.ToLower(ascii)
	if len(ascii) > 253 {
		return "", urlErr("host", "host name is longer than 253 characters")
	}
	labels := strings.Split(ascii, ".")
	// WHATWG URL parsing (and inet_aton) read a host whose last label is a number as an IPv4
	// address: 2130706433, 0x7f000001, 0177.0.0.1 and 127.1 all mean 127.0.0.1.
	if last := labels[len(labels)-1]; isNumericLabel(last) {
		return "", urlErr("ip", "must name a host, not an IP address")
	}
	if !dnsname.Valid(ascii) {
		return "", urlErr("host", "host %q is not a valid hostname", safetext.Cut(host))
	}
	return ascii, nil
}

// isNumericLabel reports whether l is all digits or 0x followed by hex digits (or nothing).
func isNumericLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") {
		for _, c := range l[2:] {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
