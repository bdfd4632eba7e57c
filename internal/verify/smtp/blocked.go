package smtp

import "strings"

// builtinBlocked are providers known to block or falsify RCPT probes from third parties; a
// probe would only earn the worker's address a bad reputation. "name.*" matches the name under
// any public suffix of one or two labels (yahoo.com, yahoo.co.uk, yahoo.com.br).
var builtinBlocked = []string{
	"gmail.com", "googlemail.com",
	"yahoo.*", "ymail.com", "rocketmail.com", "yahoodns.net",
	"outlook.*", "hotmail.*", "live.*", "msn.com", "passport.com", "windowslive.com",
	"aol.com", "aim.com", "verizon.net",
	"icloud.com", "me.com", "mac.com",
	"att.net", "sbcglobal.net", "bellsouth.net",
}

// blockList matches domains against exact names (and their subdomains) and "name.*" patterns.
type blockList struct {
	exact    map[string]bool
	prefixes map[string]bool // "yahoo" for "yahoo.*"
}

func newBlockList(extra []string) blockList {
	b := blockList{exact: map[string]bool{}, prefixes: map[string]bool{}}
	for _, d := range append(append([]string(nil), builtinBlocked...), extra...) {
		d = strings.ToLower(strings.TrimSpace(strings.TrimSuffix(d, ".")))
		if name, ok := strings.CutSuffix(d, ".*"); ok {
			b.prefixes[name] = true
		} else if d != "" {
			b.exact[d] = true
		}
	}
	return b
}

func (b blockList) match(domain string) bool {
	domain = strings.ToLower(strings.TrimSuffix(domain, "."))
	for d := domain; ; {
		if b.exact[d] {
			return true
		}
		_, rest, ok := strings.Cut(d, ".")
		if !ok {
			break
		}
		d = rest
	}
	name, suffix, ok := strings.Cut(domain, ".")
	return ok && b.prefixes[name] && strings.Count(suffix, ".") <= 1
}
