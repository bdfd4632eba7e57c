package list_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/list"
)

// A CSV row whose quoted cells span lines is bounded like a line (docs/lists.md, "Limits"): an
// unclosed quote would otherwise make the reader hold the rest of the file, up to the byte limit,
// as one cell, and a closed one store it as one. The refusal names the row's first line.
func TestCSVRowSpanningLinesIsBounded(t *testing.T) {
	t.Parallel()
	lines := strings.Repeat(strings.Repeat("x", 50)+"\n", 10) // 510 bytes of short lines
	for _, c := range []struct{ name, file string }{
		{"unclosed quote", "email,note\nann@x.test,ok\nbob@x.test,\"oops\n" + lines + "zed@x.test,z\n"},
		{"closed quote", "email,note\nann@x.test,ok\nbob@x.test,\"" + lines + "\"\nzed@x.test,z\n"},
		{"closed quote CRLF", "email,note\r\nann@x.test,ok\r\nbob@x.test,\"" + strings.ReplaceAll(lines, "\n", "\r\n") + "\"\r\n"},
		{"lone CR file", "email,note\rann@x.test,ok\rbob@x.test,\"" + strings.ReplaceAll(lines, "\n", "\r") + "\"\r"},
	} {
		_, _, err := readAll(t, list.CSV, "", c.file)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 3 || !strings.Contains(in.Msg, "longer than 200 bytes") {
			t.Errorf("%s: %v, want an InputError on line 3 about the row's length", c.name, err)
		}
	}
	// A row spanning lines within the limit is read, its line breaks kept; and the lines after
	// it count from zero again.
	_, rows, err := readAll(t, list.CSV, "", "email,note\nann@x.test,\"a\nb\"\n"+
		"bob@x.test,"+strings.Repeat("y", 180)+"\nzed@x.test,\""+strings.Repeat("z\n", 90)+"\"\n")
	if err != nil || len(rows) != 3 || rows[0].Cols[1] != "a\nb" || rows[2].Cols[1] != strings.Repeat("z\n", 90) {
		t.Errorf("rows %+v, err %v", rows, err)
	}
	// Escaped quotes ("") inside a quoted cell do not end it.
	_, _, err = readAll(t, list.CSV, "", "email,note\nann@x.test,\"say \"\"hi\"\"\n"+lines+"\"\n")
	var in *list.InputError
	if !errors.As(err, &in) || in.Line != 2 {
		t.Errorf("escaped quotes: %v, want line 2", err)
	}
}

// The memory an unclosed quote makes the reader hold is a row's, not the file's.
func TestUnclosedQuoteHoldsNoMoreThanARow(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString("email,n\na@x.test,\"")
	for b.Len() < 8<<20 {
		b.WriteString(strings.Repeat("x", 99) + "\n")
	}
	rd, err := list.NewReader(&b, list.CSV, "", list.Limits{MaxRows: 10, MaxLineBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rd.Next()
	var in *list.InputError
	if !errors.As(err, &in) || in.Line != 2 || !strings.Contains(in.Msg, "quote") {
		t.Fatalf("%v, want line 2 naming the quote", err)
	}
	if b.Len() < 7<<20 {
		t.Errorf("the reader read %d bytes of the file to refuse a row of 100 KB", 8<<20-b.Len())
	}
}

// A CSV without a header whose address is not in its first column is still named for what it is,
// with line 1 (docs/lists.md, "Bad input"), not as a file whose first column holds no address.
func TestHeaderlessCSVWithTheAddressInALaterColumn(t *testing.T) {
	t.Parallel()
	for _, file := range []string{
		"Ann,ann@x.test,Paris\nBob,bob@x.test,Rome\n",
		"Ann;ann@x.test\nBob;bob@x.test\n",
	} {
		_, _, err := readAll(t, list.CSV, "", file)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 1 || !strings.Contains(in.Msg, "add a header row") {
			t.Errorf("%q: %v, want line 1: add a header row", file, err)
		}
	}
	// A header naming its email column is a header, whatever its other names hold.
	if _, rows, err := readAll(t, list.CSV, "", "name,email,note (from a@b)\nAnn,ann@x.test,x\n"); err != nil || len(rows) != 1 {
		t.Errorf("header with an @ in another name: %v %v", rows, err)
	}
}

// A cell that is not UTF-8 is named by its own line, not its row's first.
func TestBadCellNamesItsOwnLine(t *testing.T) {
	t.Parallel()
	_, _, err := readAll(t, list.CSV, "", "email,a,b\nann@x.test,\"x\ny\",\"\n\nJos\xe9\"\n")
	var in *list.InputError
	if !errors.As(err, &in) || in.Line != 3 || !strings.Contains(in.Msg, `column "b"`) {
		t.Errorf("%v, want line 3 (where column b starts)", err)
	}
}

// A workbook or a compressed file sent as a list is named for what it is, with line 1, instead
// of being refused for a NUL byte or for not being UTF-8 (docs/lists.md, "Bad input").
func TestBinaryFilesAreNamed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, head, says string }{
		{"xlsx", "PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00b\xee\x9dh^\x01\x00\x00\x90\x04\x00\x00\x13\x00", "(.xlsx)"},
		{"xls", "\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1\x00\x00\x00\x00\x00\x00\x00\x00", "(.xls)"},
		{"gzip", "\x1F\x8B\x08\x00\x00\x00\x00\x00\x00\x03\xcbH\xcd\xc9\xc9\x07\x00", "gzip"},
	} {
		for _, f := range []list.Format{list.CSV, list.NDJSON, list.Text} {
			_, _, err := readAll(t, f, "", c.head)
			var in *list.InputError
			if !errors.As(err, &in) || in.Line != 1 || !strings.Contains(in.Msg, c.says) {
				t.Errorf("%s as %s: %v, want line 1 saying %s", c.name, f, err, c.says)
			}
		}
	}
	// A text file that merely starts with the letters PK is a text file.
	if _, rows, err := readAll(t, list.Text, "", "PK@x.test\n"); err != nil || len(rows) != 1 {
		t.Errorf("PK@x.test: %v %v", rows, err)
	}
}

// The row bound never refuses a file that encoding/csv reads with every row within it: random
// files of quoted cells with quotes, separators and line breaks (LF and CRLF), written by
// encoding/csv, come back whole.
func TestRowBoundKeepsEveryFileWithinIt(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "b@x.test", "\"", "\"\"", ",", ";", "\n", "\r\n", " ", "é", "="}
	for n := range 300 {
		var buf bytes.Buffer
		w := csv.NewWriter(&buf)
		w.UseCRLF = n%2 == 0
		want := [][]string{{"email", "note"}}
		for range 1 + rng.IntN(20) {
			var cell strings.Builder
			for range rng.IntN(12) {
				cell.WriteString(pieces[rng.IntN(len(pieces))])
			}
			want = append(want, []string{"ann@x.test", cell.String()})
		}
		if err := w.WriteAll(want); err != nil {
			t.Fatal(err)
		}
		_, rows, err := readAll(t, list.CSV, "", buf.String())
		if err != nil || len(rows) != len(want)-1 {
			t.Fatalf("file %q: %d rows, %v", buf.String(), len(rows), err)
		}
		for i, r := range rows {
			if got := strings.ReplaceAll(want[i+1][1], "\r\n", "\n"); r.Cols[1] != got {
				t.Fatalf("file %q row %d: %q, want %q", buf.String(), i+1, r.Cols[1], got)
			}
		}
	}
}

// An address cell longer than MaxAddressBytes is stored and compared in a bounded form that stays
// one per distinct cell, in every format; its case and blanks still do not count.
func TestLongAddressCellsAreBoundedAndDistinct(t *testing.T) {
	t.Parallel()
	lim := list.Limits{MaxRows: 10, MaxLineBytes: 100 << 10}
	a := strings.Repeat("é", 3000) + "x@acme.test"
	b := strings.Repeat("é", 3000) + "y@acme.test"
	for _, c := range []struct {
		f    list.Format
		file string
	}{
		{list.CSV, "email\n" + a + "\n " + strings.ToUpper(a) + " \n" + b + "\n"},
		{list.Text, a + "\n" + strings.ToUpper(a) + "\n" + b + "\n"},
		{list.NDJSON, `{"email":"` + a + `"}` + "\n" + `{"email":" ` + strings.ToUpper(a) + `"}` + "\n" + `{"email":"` + b + `"}` + "\n"},
	} {
		rd, err := list.NewReader(strings.NewReader(c.file), c.f, "", lim)
		if err != nil {
			t.Fatal(err)
		}
		var rows []list.Row
		for {
			r, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", c.f, err)
			}
			rows = append(rows, r)
		}
		if len(rows) != 3 || rows[0].Email != rows[1].Email || rows[0].Email == rows[2].Email {
			t.Fatalf("%s: %d rows, keys equal %v, %v", c.f, len(rows), rows[0].Email == rows[1].Email, rows[0].Email == rows[2].Email)
		}
		for _, r := range rows {
			if len(r.Email) > list.MaxAddressBytes+3+64 || !utf8.ValidString(r.Email) || !strings.HasPrefix(r.Email, strings.Repeat("é", 500)) {
				t.Errorf("%s: key of %d bytes %.40q", c.f, len(r.Email), r.Email)
			}
		}
	}
	// Up to the bound the address is its normalised form, byte for byte.
	at := strings.Repeat("a", list.MaxAddressBytes-len("@acme.test")) + "@ACME.test"
	rd, err := list.NewReader(strings.NewReader(at+"\n"), list.Text, "", lim)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := rd.Next(); err != nil || r.Email != strings.ToLower(at) {
		t.Errorf("address of exactly %d bytes: %v, %d bytes", list.MaxAddressBytes, err, len(r.Email))
	}
}
