package api

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/safetext"
)

// This file holds the checks on the parts of a request that arrive before any handler reads it:
// the query string and the client's X-Request-Id.

// strictQuery refuses, on the /v1 API routes, a query string that does not parse or that gives a
// parameter more than once (docs/api.md, "Conventions"). Handlers read parameters through Echo
// (c.QueryParam, c.QueryParams), which uses Go's URL.Query: it silently drops every pair it
// cannot parse, and a repeated parameter reads as its first value. A mistyped escape in
// webhook_secret would then create a list whose callbacks are unsigned, and a bad limit would
// quietly be the default. Once this check has passed, what the handlers read is exactly what the
// client sent. It runs before the key is checked, like the body limit: the query string is part
// of the request line, and its refusal needs nothing from the account.
//
// The dashboard (/dashboard), /docs/errors and /openapi.json are left alone: they are pages
// for browsers, which ignore what they do not read.
func strictQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := c.Request().URL
		if u.RawQuery == "" || !strings.HasPrefix(u.Path, "/v1/") {
			return next(c)
		}
		if err := checkQuery(u.RawQuery); err != nil {
			return err
		}
		return next(c)
	}
}

// onlyQuery refuses a query parameter other than names, on a route whose section of the docs
// says so (docs/api.md, "Conventions"): a mistyped filter (stauts=deliverable) would otherwise be
// read as no filter, and the answer taken for what was asked.
func onlyQuery(c echo.Context, names ...string) error {
	for _, k := range slices.Sorted(maps.Keys(c.QueryParams())) {
		if !slices.Contains(names, k) {
			return InvalidRequest("Unknown query parameter %q; use %s.", clip(k), andList(names))
		}
	}
	return nil
}

// andList joins names as a sentence does: "a", "a and b", "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// checkQuery parses raw as Go's URL.Query would and refuses, naming the first bad part, what
// that would drop or merge: a pair with a bad percent-escape or a ";" in it, more pairs than Go
// parses at all, and a parameter that appears twice.
func checkQuery(raw string) error {
	_, whole := url.ParseQuery(raw)
	seen := make(map[string]bool)
	for rest := raw; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if pair == "" {
			continue // "a=1&&b=2": Go skips the empty pair too
		}
		if strings.Contains(pair, ";") {
			return InvalidRequest(`The query string is malformed: %q holds a ";"; separate parameters with "&" and write a literal ";" as %%3B.`, clip(pair))
		}
		vals, err := url.ParseQuery(pair)
		if err != nil {
			var esc url.EscapeError
			if errors.As(err, &esc) {
				return InvalidRequest(`The query string is malformed: %q holds the bad percent-escape %q; write a literal "%%" as %%25.`, clip(pair), clip(string(esc)))
			}
			return InvalidRequest("The query string is malformed: %q cannot be parsed (%v).", clip(pair), err)
		}
		for k := range vals { // one pair, one key
			if seen[k] {
				return InvalidRequest("Query parameter %q is given more than once.", clip(k))
			}
			seen[k] = true
		}
	}
	// Every pair parses on its own, yet Go refuses the whole: too many parameters
	// (GODEBUG urlmaxqueryparams, 10,000 by default), where URL.Query would return none.
	if whole != nil {
		return InvalidRequest("The query string is malformed: %v.", whole)
	}
	return nil
}

// clip shortens s for a message: the query string can be as long as the request headers (1 MB),
// and an error message quotes only enough of it to find the place (safetext.Cut).
func clip(s string) string { return safetext.Cut(s) }

// maxRequestIDLen is the longest X-Request-Id accepted from a client (docs/api.md, "Conventions").
const maxRequestIDLen = 128

// boundRequestID drops a client's X-Request-Id that is empty, longer than maxRequestIDLen bytes
// or holds anything but letters, digits and . _ : -, so that middleware.RequestID, which runs
// next, generates one instead. The id is echoed in the response and written to every log line of
// the request, on every route and before any key is checked: unbounded, a client could write a
// megabyte into the log with each request, or bytes that confuse whoever reads it.
func boundRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if _, sent := h[http.CanonicalHeaderKey(echo.HeaderXRequestID)]; sent && !validRequestID(h.Get(echo.HeaderXRequestID)) {
			h.Del(echo.HeaderXRequestID)
		}
		return next(c)
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '.', b == '_', b == ':', b == '-':
		default:
			return false
		}
	}
	return true
}
