package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
)

// bindJSON decodes a JSON request body into dst, strictly: the Content-Type must be JSON, sent
// once, with no charset but UTF-8, the body one object, and unknown fields are refused so that a
// mistyped field name is an error instead of a silently ignored one. A NUL character anywhere in
// the body is refused too (refuseNUL), and so is what encoding/json would let through
// (strictJSON): text that is not UTF-8, a field name in another case, a field given twice. Every
// failure is a 400 whose message names the field.
func bindJSON(c echo.Context, dst any) error {
	ct, err := contentType(c.Request())
	if err != nil {
		return err
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != echo.MIMEApplicationJSON {
		return InvalidRequest("Content-Type must be application/json, not %q.", clip(ct))
	}
	// The body is always read as UTF-8 (docs/api.md, "Conventions"): one labelled another charset
	// would be read as other text than was meant, and latin1 bytes that happen to be valid UTF-8
	// ("Ã©" is the bytes of "é") would pass every check below as another address or label.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return InvalidRequest("Content-Type charset %q is not supported: send the JSON body in UTF-8, with charset=utf-8 or no charset.", clip(cs))
	}
	// A compressed body would be read as its compressed bytes ("holds a NUL byte"), and a plain
	// one labelled compressed would be taken as it is: both say something other than was meant.
	if enc := c.Request().Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return InvalidRequest("Content-Encoding %q is not supported: send the JSON body uncompressed.", clip(enc))
	}
	// The whole body is read first so that the NUL check sees all of it before any field is
	// used. The body guard caps it at MaxBodyBytes, and the decoder buffered all of it anyway.
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return jsonError(err)
	}
	if err := refuseNUL(body); err != nil {
		return err
	}
	// strictJSON refuses at once what encoding/json would mangle (text that is not UTF-8, a
	// field given twice). A plain syntax error it finds is left to encoding/json, whose messages
	// say what is wrong (empty, truncated, not an object, at byte N), and so is a name in another
	// case: encoding/json reports the body's other faults first, in the order they stand, and the
	// name is refused only if there is none.
	var (
		syntax  *jsonSyntaxError
		unknown *unknownFieldError
	)
	if err := strictJSON(body, reflect.TypeOf(dst)); err != nil && !errors.As(err, &syntax) && !errors.As(err, &unknown) {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return InvalidRequest("Request body must hold exactly one JSON object.")
	}
	switch {
	case syntax != nil:
		// Not expected: the two parsers disagree on the grammar. The stricter one decides.
		return InvalidRequest("Request body is not valid JSON (at byte %d).", syntax.offset)
	case unknown != nil:
		return InvalidRequest("Unknown field %q.", clip(unknown.name))
	}
	return nil
}

// contentType is the request's Content-Type, which must be sent at most once: of two, the
// server would read the first and the body might be in the other (a proxy may have added one),
// so both are refused (docs/errors.md, "invalid_request").
func contentType(r *http.Request) (string, error) {
	if vals := r.Header.Values(echo.HeaderContentType); len(vals) > 1 {
		return "", InvalidRequest("Send the Content-Type header once, not %d times.", len(vals))
	}
	return r.Header.Get(echo.HeaderContentType), nil
}

// strictJSON checks the first JSON value of body for what encoding/json accepts but the API
// refuses, so that no request is answered, or metered, for text other than what was sent:
//
//   - bytes that are not UTF-8, and \u escapes of a lone UTF-16 surrogate (\ud800): encoding/json
//     turns both into U+FFFD, so "ann\xff@acme.example" would be verified as another address;
//   - a member name that is not exactly the json name of a field of the destination type t:
//     encoding/json matches names case-insensitively, so {"Webhook_URL": …} would set webhook_url;
//   - a member given twice in one object: encoding/json keeps the last, silently.
//
// Objects are checked at every depth; their names are checked against t where t is a struct.
// A syntax error of any other kind is returned as a *jsonSyntaxError; the first unknown name,
// when the value is otherwise valid, as an *unknownFieldError.
func strictJSON(body []byte, t reflect.Type) error {
	s := strictReader{dec: jsontext.NewDecoder(bytes.NewReader(body)), body: body}
	if err := s.value(t); err != nil {
		return err
	}
	if s.unknown != nil {
		return s.unknown
	}
	return nil
}

// unknownFieldError is a member name that the destination type does not have, exactly.
type unknownFieldError struct{ name string }

func (e *unknownFieldError) Error() string { return "unknown field " + strconv.Quote(e.name) }

// jsonSyntaxError is a syntax error that encoding/json reports in its own words.
type jsonSyntaxError struct{ offset int64 }

func (e *jsonSyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.FormatInt(e.offset, 10)
}

// strictReader walks one JSON value token by token, keeping where it is (at) so that a refusal
// can name the field in the API's notation (webhook_url, emails[3], a.b). The name is written
// out only for a refusal: a batch of 1,000 addresses costs no string per address.
// jsontext.Decoder does the syntax: by default it refuses invalid UTF-8, invalid surrogate
// escapes and duplicate member names.
type strictReader struct {
	dec     *jsontext.Decoder
	body    []byte
	at      []step             // the members and elements from the top to the value being read
	unknown *unknownFieldError // the first member name that t does not have
}

// step is one level of strictReader.at: a member's name, or an array element's index.
type step struct {
	name  string
	index int
	elem  bool
}

// path is strictReader.at in the API's notation; "" at the top.
func (s *strictReader) path() string {
	var b strings.Builder
	for _, st := range s.at {
		switch {
		case st.elem:
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + st.name)
		default:
			b.WriteString(st.name)
		}
	}
	return b.String()
}

// child reads the value of one member or element of the value being read.
func (s *strictReader) child(st step, t reflect.Type) error {
	s.at = append(s.at, st)
	err := s.value(t)
	s.at = s.at[:len(s.at)-1]
	return err
}

// value reads one value; t is the Go type it decodes into, nil when its member names are not
// checked (json.RawMessage, any, a type that decodes itself).
func (s *strictReader) value(t reflect.Type) error {
	t = deref(t)
	switch kind := s.dec.PeekKind(); kind {
	case '{':
		if _, err := s.dec.ReadToken(); err != nil {
			return s.fault(err, false, false)
		}
		fields := jsonFields(t)
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		for {
			next := s.dec.PeekKind()
			tok, err := s.dec.ReadToken()
			if err != nil {
				return s.fault(err, next == '"', true)
			}
			if next == '}' {
				return nil
			}
			name := tok.String()
			ft := elem
			if fields != nil {
				var ok bool
				if ft, ok = fields[name]; !ok && s.unknown == nil {
					s.unknown = &unknownFieldError{name: joinPath(s.path(), name)}
				}
			}
			if err := s.child(step{name: name}, ft); err != nil {
				return err
			}
		}
	case '[':
		if _, err := s.dec.ReadToken(); err != nil {
			return s.fault(err, false, false)
		}
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; ; i++ {
			if s.dec.PeekKind() == ']' {
				if _, err := s.dec.ReadToken(); err != nil {
					return s.fault(err, false, false)
				}
				return nil
			}
			if err := s.child(step{index: i, elem: true}, elem); err != nil {
				return err
			}
		}
	default:
		if _, err := s.dec.ReadToken(); err != nil {
			return s.fault(err, kind == '"', false)
		}
		return nil
	}
}

// fault maps an error of the decoder reading the token where s is: a member name of the object
// there (inName), or its value. inString says the token began as a string, so that a bad byte is
// in its text rather than between tokens.
func (s *strictReader) fault(err error, inString, inName bool) error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &jsonSyntaxError{} // io.EOF: an empty body
	}
	off := se.ByteOffset
	// The path is made of the client's member names: clip it, so that a refusal never echoes a
	// name of up to the whole body back (docs/errors.md, "invalid_request").
	path := clip(s.path())
	where := "Field " + path
	switch {
	case inName && path == "":
		where = "A field name"
	case inName:
		where = "A field name in " + path
	case path == "":
		where = "Request body"
	}
	switch {
	case se.Err == jsontext.ErrDuplicateName:
		return InvalidRequest("Field %s is given more than once.", clip(joinPath(path, se.JSONPointer.LastToken())))
	case badUTF8At(s.body, off):
		if !inString {
			where = "Request body"
		}
		return InvalidRequest("%s is not valid UTF-8 (at byte %d).", where, off)
	case inString:
		if esc, ok := surrogateAt(s.body, off); ok {
			return InvalidRequest("%s holds %s (at byte %d), a UTF-16 surrogate escape without its pair, which is no character.", where, esc, off)
		}
	}
	return &jsonSyntaxError{offset: off}
}

// badUTF8At reports whether the bytes at off do not begin a UTF-8 character.
func badUTF8At(b []byte, off int64) bool {
	if off < 0 || off >= int64(len(b)) {
		return false
	}
	r, size := utf8.DecodeRune(b[off:])
	return r == utf8.RuneError && size == 1
}

// surrogateAt returns the \u escape at off if it is one of a UTF-16 surrogate (D800–DFFF).
func surrogateAt(b []byte, off int64) (string, bool) {
	if off < 0 || off+6 > int64(len(b)) || b[off] != '\\' || b[off+1] != 'u' {
		return "", false
	}
	esc := string(b[off : off+6])
	n, err := strconv.ParseUint(esc[2:], 16, 16)
	return esc, err == nil && n >= 0xD800 && n <= 0xDFFF
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonFields maps the exact json names of struct type t to their types, as encoding/json names
// them: the tag's name, else the Go name; "-" is no field; an untagged embedded struct lends its
// fields. It is nil when t is not a struct, or decodes itself: such names are not checked.
// The request types are few and fixed, so each one's map is built once (fieldsOf).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct ||
		reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	if f, ok := fieldsOf.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	addFields(t, fields)
	fieldsOf.Store(t, fields)
	return fields
}

// fieldsOf caches jsonFields by type; the maps are only read once stored.
var fieldsOf sync.Map

func addFields(t reflect.Type, fields map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if et := deref(f.Type); f.Anonymous && name == "" && et.Kind() == reflect.Struct {
			addFields(et, fields)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

// jsonError maps a failure to read or decode a request body. Reading fails only with the body
// guard's 413 or the body read deadline (bodyDeadline); everything else is the client's JSON.
func jsonError(err error) error {
	var (
		he     *echo.HTTPError
		ne     net.Error
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &he):
		return he // the body guard's 413
	case errors.As(err, &ne) && ne.Timeout():
		return requestTimeout()
	case errors.Is(err, io.EOF):
		return InvalidRequest("Request body is empty; send a JSON object.")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return InvalidRequest("Request body is truncated JSON.")
	case errors.As(err, &syntax):
		return InvalidRequest("Request body is not valid JSON (at byte %d).", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return InvalidRequest("Request body must be a JSON object, not %s.", typ.Value)
		}
		return InvalidRequest("Field %s must be %s, not %s.", typ.Field, jsonType(typ.Type.String()), typ.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, err := strconv.Unquote(f); err == nil {
			return InvalidRequest("Unknown field %q.", clip(name))
		}
		return InvalidRequest("Unknown field %s.", clip(f))
	}
	return InvalidRequest("Request body is not valid JSON.")
}

// jsonType names the JSON value a Go type decodes from, with its article.
func jsonType(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch goType {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "float64":
		return "a number"
	case "[]string":
		return "an array of strings"
	}
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	}
	return "a value of another type"
}
