package list_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/list"
)

// Whatever the file, the reader ends (a row count within the limit, then io.EOF or an error), never
// panics, names lines that exist, and hands out addresses that are valid UTF-8 without NUL and
// bounded (docs/lists.md, "Bad input", "Limits").
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"email\nann@x.test\n", "\ufeffname;email\r\nA;a@x.test\r\n", "email,n\ra@x.test,\"x\ry\"\r",
		"email,n\na@x.test,\"oops\nb@x.test,z\n", "{\"email\":\"a@x.test\"}\n", "a@x.test\n\n b@x.test ",
		"\xff\xfea\x00", "PK\x03\x04", "email\n\"a\"\"b\"\n", "e\tm\na@x\tb\n",
	} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, file string, which uint8) {
		format := []list.Format{list.CSV, list.NDJSON, list.Text}[int(which)%3]
		lim := list.Limits{MaxRows: 50, MaxLineBytes: 64}
		lines := strings.Count(file, "\n") + strings.Count(file, "\r") + 1
		check := func(err error) {
			var in *list.InputError
			if errors.As(err, &in) && (in.Line < 0 || in.Line > lines) {
				t.Fatalf("%s: line %d of a file of at most %d lines: %v", format, in.Line, lines, err)
			}
		}
		rd, err := list.NewReader(strings.NewReader(file), format, "", lim)
		if err != nil {
			check(err)
			return
		}
		for n := 0; ; n++ {
			if n > lim.MaxRows+1 {
				t.Fatalf("%s: more than %d rows", format, lim.MaxRows)
			}
			row, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				check(err)
				return
			}
			if !utf8.ValidString(row.Email) || strings.IndexByte(row.Email, 0) >= 0 || len(row.Email) > list.MaxAddressBytes+3+64 {
				t.Fatalf("%s: address %q", format, row.Email)
			}
		}
	})
}
