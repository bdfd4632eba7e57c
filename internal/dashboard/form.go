package dashboard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// A form whose field is far too long (text pasted into the wrong field, a script's mistake) must
// not cost the user the whole form (docs/dashboard.md, "Forms"): the dashboard reads the body to
// its end within maxFormBody, keeps at most maxFormField bytes of each value, and lets the page's
// own checks refuse the long field by name, with the other fields as they were sent. Only a body
// over maxFormBody, which no form of the dashboard comes near, is refused whole.
const (
	// maxFormBody bounds a URL-encoded form's body, read as it arrives; the largest form (a
	// password change) needs well under 4 KB, a pasted 1 MB field fits.
	maxFormBody = 2 << 20
	// maxFormField is what is kept of one value: more than any field of the dashboard accepts
	// (the longest, a list's name or column, is 200 characters; a password 256 bytes), so that
	// what is kept of a longer one is still refused by the page's own check of that field.
	maxFormField = 1 << 10
	// maxFormFields bounds the fields kept; the largest form has eight.
	maxFormFields = 32
	// maxFieldName bounds a field's name as read; longer names are nobody's field and are skipped.
	maxFieldName = 64
)

// errFormTooLarge is a form body over maxFormBody.
var errFormTooLarge = errors.New("form body over the limit")

// readURLEncoded reads a URL-encoded form from body: every field in order, each value cut to
// maxFormField bytes (after unescaping). long names the fields that were cut, with their
// length in bytes.
func readURLEncoded(body io.Reader) (form url.Values, long map[string]int, err error) {
	form, long = url.Values{}, map[string]int{}
	br := bufio.NewReaderSize(body, 4096)
	for fields := 0; ; {
		name, value, n, more, err := nextPair(br)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, nil, errFormTooLarge
			}
			return nil, nil, err
		}
		if name != "" || n > 0 {
			key, kerr := url.QueryUnescape(name)
			val, verr := url.QueryUnescape(trimEscape(value))
			if kerr != nil || verr != nil {
				return nil, nil, fmt.Errorf("form field %q: bad escape", name)
			}
			if n > maxFormField { // then, and only then, was the escaped value cut in nextPair
				// Cut on a character's boundary: the page may show what is kept.
				val = strings.ToValidUTF8(val[:min(len(val), maxFormField)], "")
				long[key] = n
			}
			if fields < maxFormFields && len(name) <= maxFieldName {
				form.Add(key, val)
				fields++
			}
		}
		if !more {
			return form, long, nil
		}
	}
}

// nextPair reads one name=value pair up to '&' or the end: the name (at most maxFieldName+1
// bytes kept), the escaped value (at most 3×maxFormField+2 bytes kept, enough for maxFormField
// bytes escaped), the value's whole length n once unescaped (each %XX one byte), and whether
// another pair follows.
func nextPair(br *bufio.Reader) (name, value string, n int, more bool, err error) {
	var nb, vb strings.Builder
	inValue := false
	escaped := 0 // the bytes of %XX escapes still to come
	for {
		c, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			return nb.String(), vb.String(), n, false, nil
		}
		if err != nil {
			return "", "", 0, false, err
		}
		switch {
		case c == '&':
			return nb.String(), vb.String(), n, true, nil
		case c == '=' && !inValue:
			inValue = true
		case inValue:
			if escaped > 0 {
				escaped--
			} else {
				n++
				if c == '%' {
					escaped = 2
				}
			}
			if vb.Len() < 3*maxFormField+2 {
				vb.WriteByte(c)
			}
		case nb.Len() <= maxFieldName:
			nb.WriteByte(c)
		}
	}
}

// trimEscape drops a %XX escape cut short at the end of a kept value.
func trimEscape(v string) string {
	if i := strings.LastIndexByte(v, '%'); i >= 0 && len(v)-i < 3 {
		return v[:i]
	}
	return v
}

// fieldNames are the forms' fields as their labels name them, for the message about a long one.
var fieldNames = map[string]string{
	"email": "Email", "password": "Password", "password_confirm": "Password again", "label": "Label",
	"current_password": "Current password", "new_password": "New password", "new_password_confirm": "New password again",
	"name": "Name", "column": "Email column", "cap_eur": "Hard cap", "key_id": "Key", "format": "Format",
}

// tooLongText says which field was too long, by its label, and that the rest is kept.
func tooLongText(field string, n int) string {
	label := fieldNames[field]
	if label == "" {
		label = field
	}
	return fmt.Sprintf("The field %q was %s bytes long, far more than it takes: shorten it and send the form again (the other fields are as you left them).",
		label, num(n))
}
