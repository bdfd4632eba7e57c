package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Postgres cannot store U+0000: text columns refuse the byte and jsonb refuses the \u0000
// escape. A NUL that reached a query would fail it, and the client would be told to retry a
// request that can never succeed. So it is bad input, refused before any field is used. The other
// text Postgres refuses, invalid UTF-8 and lone surrogates (\ud800), is refused by strictJSON,
// after this check: encoding/json would turn it into U+FFFD while decoding.

// escapedNUL is how JSON spells U+0000 inside a string. JSON allows no other spelling: \U0000 is
// not an escape, and a raw zero byte is not allowed in a string at all.
var escapedNUL = []byte(`\u0000`)

// refuseNUL is the 400 for a JSON body with a NUL character in any string, naming the field that
// holds it. Most bodies hold none; for them this is two byte scans.
func refuseNUL(body []byte) error {
	raw := bytes.IndexByte(body, 0)
	if raw < 0 && !bytes.Contains(body, escapedNUL) {
		return nil
	}
	if where, found := findNUL(body); found {
		return where.refusal()
	}
	if raw >= 0 {
		// Not in a string of the first JSON value: a zero byte is invalid JSON anywhere.
		return InvalidRequest("Request body holds a NUL byte (at byte %d), which JSON does not allow.", raw)
	}
	// Either the body is not JSON, which the strict decoder reports, or the "\u0000" was the text
	// of an escaped backslash ("\\u0000"), which is no NUL.
	return nil
}

// findNUL decodes body loosely and looks for the first string, value or field name, that holds a
// NUL. A raw zero byte is invalid in JSON wherever it stands, so reading it as the escape cannot
// change the meaning of a valid document; inside a string it lets the field be named. Nothing is
// found in a body that is not JSON.
func findNUL(body []byte) (nulAt, bool) {
	dec := json.NewDecoder(bytes.NewReader(bytes.ReplaceAll(body, []byte{0}, escapedNUL)))
	dec.UseNumber() // numbers like 1e999 are the strict decoder's to refuse, not a reason to stop here
	var v any
	if err := dec.Decode(&v); err != nil {
		return nulAt{}, false
	}
	return nulIn(v, "")
}

// nulAt is where a NUL was found: the JSON path of the field (email, emails[3], a.b), and whether
// it was in the field's name rather than its value.
type nulAt struct {
	path   string
	inName bool
}

func (n nulAt) refusal() *Error {
	const why = "contains a NUL character (U+0000), which no field may hold; remove it"
	switch {
	case n.inName:
		return InvalidRequest("Field name %s %s.", strconv.Quote(clip(n.path)), why)
	case n.path == "":
		return InvalidRequest("Request body %s.", why)
	}
	return InvalidRequest("Field %s %s.", clip(n.path), why)
}

// nulIn walks a decoded JSON value depth first; object fields are visited in name order so the
// field named is the same on every run.
func nulIn(v any, path string) (nulAt, bool) {
	switch x := v.(type) {
	case string:
		return nulAt{path: path}, strings.IndexByte(x, 0) >= 0
	case []any:
		for i, e := range x {
			if at, ok := nulIn(e, path+"["+strconv.Itoa(i)+"]"); ok {
				return at, true
			}
		}
	case map[string]any:
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			child := k
			if path != "" {
				child = path + "." + k
			}
			if strings.IndexByte(k, 0) >= 0 {
				return nulAt{path: child, inName: true}, true
			}
			if at, ok := nulIn(x[k], child); ok {
				return at, true
			}
		}
	}
	return nulAt{}, false
}
