// Package redact removes credentials from connection strings before they reach a log line or an
// error message (docs/operations.md, "Logs"), and a client's address from the error of a write
// to it (Peer). url.URL.Redacted alone is not enough: it masks
// only a user:password pair, while a NATS URL may carry a bare token as its user part
// (nats://TOKEN@host) and a Postgres connection string may carry its password as a query
// parameter (?password=…) or be in keyword/value form (host=… password=…).
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// mask replaces every secret.
const mask = "xxxxx"

// secretParams are the query parameters and keywords whose value is a credential: libpq's
// password and sslpassword, and the token/password a NATS URL may be given.
var secretParams = map[string]bool{"password": true, "sslpassword": true, "token": true, "pass": true}

// keywordSecret matches a secret in a libpq keyword/value string: password=value or
// password='quoted value' (with \' and \\ escapes).
var keywordSecret = regexp.MustCompile(`(?i)\b(password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// URL returns s with every credential masked. s may be one URL, a comma-separated list of them
// (NATS_URL), or a libpq keyword/value string (DATABASE_URL). Something it cannot parse is not
// echoed at all: it might be a secret.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		if strings.Contains(s, "=") { // libpq keyword/value form
			return keywordSecret.ReplaceAllString(s, "${1}="+mask)
		}
		return "(unparsable URL)"
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = one(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func one(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "(unparsable URL)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), mask)
		} else if !strings.HasPrefix(u.Scheme, "postgres") {
			// nats://TOKEN@host: the user part alone is the credential. A Postgres URL's user
			// part alone is only a role name.
			u.User = url.User(mask)
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "(unparsable query)"
		} else {
			for k := range q {
				if secretParams[strings.ToLower(k)] {
					q.Set(k, mask)
				}
			}
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}
