package list_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/mailvet/mailvet/internal/list"
)

// An NDJSON address is checked after its escapes are decoded: an escaped NUL, which Postgres
// cannot store, and an escaped lone surrogate, which encoding/json would turn into U+FFFD, are
// refused with the line, like the raw bytes they stand for.
func TestNDJSONEscapesInEmailAreRefusedWithTheLine(t *testing.T) {
	t.Parallel()
	const good = "{\"email\":\"a@x.test\"}\n"
	for _, c := range []struct {
		name, line, says string
	}{
		{"escaped NUL", `{"email":"ann\u0000@x.test"}`, "NUL"},
		{"lone high surrogate", `{"email":"ann\ud800@x.test"}`, "surrogate"},
		{"lone low surrogate", `{"email":"ann\uDC00@x.test"}`, "surrogate"},
		{"high surrogate and no low one", `{"email":"ann\ud800\u0041@x.test", "n": 1}`, "surrogate"},
	} {
		_, _, err := readAll(t, list.NDJSON, "", good+"\n"+c.line+"\n"+good)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 3 || !strings.Contains(in.Msg, c.says) || !strings.Contains(in.Msg, `"email"`) {
			t.Errorf("%s: %v, want an InputError on line 3 about the email's %s", c.name, err, c.says)
		}
	}
	// A field given twice: which "email" was meant is a guess (encoding/json takes the last).
	for _, line := range []string{`{"email":"ann@x.test","email":"bob@x.test"}`, `{"email":"ann@x.test","crm":1,"crm":2}`,
		`{"email":"ann@x.test","note":"\ud800"}`} {
		_, _, err := readAll(t, list.NDJSON, "", good+line+"\n")
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 2 || !strings.Contains(in.Msg, "more than once") {
			t.Errorf("%s: %v, want an InputError on line 2", line, err)
		}
	}
	// Escapes of real characters are addresses like any other.
	_, rows, err := readAll(t, list.NDJSON, "", `{"email":"\ud83d\ude00@x.test"}`+"\n"+`{"email":"\ufffd@x.test"}`+"\n")
	if err != nil || len(rows) != 2 || rows[0].Email != "\U0001F600@x.test" || rows[1].Email != "\uFFFD@x.test" {
		t.Errorf("valid escapes: rows %+v, err %v", rows, err)
	}
}

// readFrom reads an upload whole from r, as readAll does from a string.
func readFrom(t *testing.T, r io.Reader, f list.Format) ([]list.Row, error) {
	t.Helper()
	rd, err := list.NewReader(r, f, "", limits)
	if err != nil {
		return nil, err
	}
	var rows []list.Row
	for {
		row, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
}

// A CSV whose header splits on semicolons, or on tabs, and on nothing else, is read with that
// separator (what a spreadsheet writes where the comma is the decimal separator), quoting
// included; a comma file with a ';' inside a quoted header cell, and a header that splits on
// both ';' and tab, keep the comma.
func TestCSVSeparatorFromTheHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file string
		columns    []string
		emails     []string
		cell       string // the first row's first cell
	}{
		{"semicolons", "\ufeffname;E-mail;\"city, country\"\r\n\"Doe; Ann\";Ann@Acme.example;\"Paris, FR\"\r\nZoe;zoe@acme.example;Lyon\r\n",
			[]string{"name", "E-mail", "city, country"}, []string{"ann@acme.example", "zoe@acme.example"}, "Doe; Ann"},
		{"semicolons, unquoted", "name;email;city\nAnn;ann@acme.example;Paris\n",
			[]string{"name", "email", "city"}, []string{"ann@acme.example"}, "Ann"},
		{"tabs", "name\temail\tcity\n\"Doe\tAnn, \"\"A\"\"\"\tann@acme.example\tBerlin\nZoe\tzoe@acme.example\t\"Köln; DE\"\n",
			[]string{"name", "email", "city"}, []string{"ann@acme.example", "zoe@acme.example"}, "Doe\tAnn, \"A\""},
		{"comma, ';' quoted in the header", "\"last;first\",email\nDoe;Ann,ann@acme.example\n",
			[]string{"last;first", "email"}, []string{"ann@acme.example"}, "Doe;Ann"},
		{"';' and tab: ambiguous, the comma", "email;x\ty\nann@acme.example;1\t2\n",
			[]string{"email;x\ty"}, []string{"ann@acme.example;1\t2"}, "ann@acme.example;1\t2"},
		// One-column comma files whose header holds a ';' or a tab that the rows do not.
		{"one column, ';' in its name", "Email (work; home)\nann@acme.example\n",
			[]string{"Email (work; home)"}, []string{"ann@acme.example"}, "ann@acme.example"},
		{"one column, a stray ';'", "email;\r\nann@acme.example\r\nzoe@acme.example\r\n",
			[]string{"email;"}, []string{"ann@acme.example", "zoe@acme.example"}, "ann@acme.example"},
		{"one column, a stray tab", "email\t\nann@acme.example\n",
			[]string{"email\t"}, []string{"ann@acme.example"}, "ann@acme.example"},
	} {
		rd, rows, err := readAll(t, list.CSV, "", c.file)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if strings.Join(rd.Columns(), "|") != strings.Join(c.columns, "|") || rd.EmailColumn() != 1 && len(c.columns) > 1 {
			t.Errorf("%s: columns %q (email %d), want %q", c.name, rd.Columns(), rd.EmailColumn(), c.columns)
		}
		var emails []string
		for _, r := range rows {
			emails = append(emails, r.Email)
			if len(r.Cols) != len(c.columns) {
				t.Errorf("%s: row %d has %d columns: %q", c.name, r.No, len(r.Cols), r.Cols)
			}
		}
		if strings.Join(emails, " ") != strings.Join(c.emails, " ") || rows[0].Cols[0] != c.cell {
			t.Errorf("%s: emails %q, first cell %q; want %q, %q", c.name, emails, rows[0].Cols[0], c.emails, c.cell)
		}
	}
	// The separator found holds for every row: a row split otherwise is ragged, with its line.
	_, _, err := readAll(t, list.CSV, "", "name;email\nAnn;ann@acme.example\nZoe,zoe@acme.example\n")
	var in *list.InputError
	if !errors.As(err, &in) || in.Line != 3 {
		t.Errorf("a comma row in a ';' file: %v, want an InputError on line 3", err)
	}
	// So is a first row that splits, but not into the header's fields: refused with its line,
	// not read as a comma file of whole lines.
	for _, file := range []string{"email;name;co\nann@acme.example;Ann\n", "email;name\nann@acme.example;Ann;\n"} {
		if _, _, err := readAll(t, list.CSV, "", file); !errors.As(err, &in) || in.Line != 2 {
			t.Errorf("%q: %v, want an InputError on line 2", file, err)
		}
	}
}

// A file whose lines end in a lone CR (old Mac "CSV (Macintosh)") has as many rows as lines, in
// all three formats, and errors name the right line; in a CSV of them, a CR inside a quoted cell
// is a line break in the cell (LF). A lone CR after a first line ending in LF or CRLF is data.
// Each file is read whole and one byte at a time, so that a CR ends a read and the next byte
// decides.
func TestCROnlyLineEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		format list.Format
		file   string
		emails []string
		cols   []string // the last row's
	}{
		{"text", list.Text, "ann@acme.example\rzoe@acme.example\r\rbob@acme.example",
			[]string{"ann@acme.example", "zoe@acme.example", "bob@acme.example"}, []string{"bob@acme.example"}},
		{"text, a CRLF among CRs", list.Text, "\ufeffann@acme.example\rzoe@acme.example\r\nbob@acme.example\r",
			[]string{"ann@acme.example", "zoe@acme.example", "bob@acme.example"}, []string{"bob@acme.example"}},
		{"NDJSON", list.NDJSON, "{\"email\":\"ann@acme.example\"}\r{\"email\":\"zoe@acme.example\"}\r",
			[]string{"ann@acme.example", "zoe@acme.example"}, []string{`{"email":"zoe@acme.example"}`}},
		{"CSV", list.CSV, "name,email\rAnn,ann@acme.example\r\"Zoe\rZed\",zoe@acme.example\r",
			[]string{"ann@acme.example", "zoe@acme.example"}, []string{"Zoe\nZed", "zoe@acme.example"}},
		{"CSV, semicolons", list.CSV, "name;email\rAnn;ann@acme.example\rZoe;zoe@acme.example",
			[]string{"ann@acme.example", "zoe@acme.example"}, []string{"Zoe", "zoe@acme.example"}},
		{"CSV of CRLF lines, a quoted lone CR", list.CSV, "name,email\r\n\"Zoe\rZed\",zoe@acme.example\r\n",
			[]string{"zoe@acme.example"}, []string{"Zoe\rZed", "zoe@acme.example"}},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(c.file)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			rows, err := readFrom(t, r, c.format)
			if err != nil {
				t.Errorf("%s (one byte at a time %t): %v", c.name, oneByte, err)
				continue
			}
			var emails []string
			for _, r := range rows {
				emails = append(emails, r.Email)
			}
			if strings.Join(emails, " ") != strings.Join(c.emails, " ") || strings.Join(rows[len(rows)-1].Cols, "|") != strings.Join(c.cols, "|") {
				t.Errorf("%s (one byte at a time %t): emails %q, last row %q; want %q, %q", c.name, oneByte, emails, rows[len(rows)-1].Cols, c.emails, c.cols)
			}
		}
	}
	for _, c := range []struct {
		name   string
		format list.Format
		file   string
		line   int
	}{
		{"text", list.Text, "ann@acme.example\r\xc3\x28@acme.example\r", 2},
		{"NDJSON", list.NDJSON, "{\"email\":\"ann@acme.example\"}\r\r[1]\r", 3},
		{"CSV", list.CSV, "name,email\rAnn,ann@acme.example\rZoe\r", 3},
	} {
		_, _, err := readAll(t, c.format, "", c.file)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != c.line {
			t.Errorf("%s: %v, want an InputError on line %d", c.name, err, c.line)
		}
	}
}

// The line limit counts a line's bytes without its end, LF or CRLF, the same in every format: a
// line of exactly the limit is read, one byte more is refused with its line. Each format and
// line end is tried, because counting the LF (text, NDJSON) or the CR (CSV) is easy to get wrong.
func TestLineLimitIsExactInEveryFormat(t *testing.T) {
	t.Parallel()
	const max = 64
	lim := list.Limits{MaxRows: 10, MaxLineBytes: max}
	// address is an address of exactly n bytes.
	address := func(n int) string { return strings.Repeat("a", n-len("@acme.test")) + "@acme.test" }
	for _, c := range []struct {
		name   string
		f      list.Format
		first  string // the lines before the long one
		line   func(n int) string
		longNo int
	}{
		{"text", list.Text, "ann@acme.test", address, 2},
		{"ndjson", list.NDJSON, `{"email":"ann@acme.test"}`, func(n int) string { return `{"email":"` + address(n-len(`{"email":""}`)) + `"}` }, 2},
		{"csv", list.CSV, "email\nann@acme.test", address, 3},
	} {
		for _, eol := range []string{"\n", "\r\n"} {
			for _, n := range []int{max, max + 1} {
				lines := strings.Split(c.first, "\n")
				file := strings.Join(lines, eol) + eol + c.line(n) + eol + "zoe@acme.test" + eol
				if c.f == list.NDJSON {
					file = strings.Join(lines, eol) + eol + c.line(n) + eol + `{"email":"zoe@acme.test"}` + eol
				}
				// CSV may meet the long line while it reads the header: encoding/csv reads ahead.
				rd, rowErr := list.NewReader(strings.NewReader(file), c.f, "", lim)
				rows := 0
				for rowErr == nil {
					_, err := rd.Next()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						rowErr = err
						break
					}
					rows++
				}
				var in *list.InputError
				switch {
				case n == max && rowErr != nil:
					t.Errorf("%s, %q ends: a line of exactly %d bytes refused: %v", c.name, eol, max, rowErr)
				case n == max && rows != 3:
					t.Errorf("%s, %q ends: %d rows, want 3", c.name, eol, rows)
				case n > max && (!errors.As(rowErr, &in) || in.Line != c.longNo || !strings.Contains(in.Msg, "longer than")):
					t.Errorf("%s, %q ends: a line of %d bytes: %v, want refused on line %d", c.name, eol, n, rowErr, c.longNo)
				}
			}
		}
	}
}
