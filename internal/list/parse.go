package list

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/mailvet/mailvet/internal/safetext"
)

// Format is the encoding of an uploaded list (docs/lists.md, "Uploading").
type Format string

// The formats a list can be uploaded in.
const (
	CSV    Format = "csv"    // text/csv: a header row, then one row per address
	NDJSON Format = "ndjson" // application/x-ndjson: {"email": …} per line
	Text   Format = "text"   // text/plain: one address per line
)

// FormatOf maps a request's media type (without parameters) to a Format.
func FormatOf(mediaType string) (Format, bool) {
	switch strings.ToLower(mediaType) {
	case "text/csv", "application/csv":
		return CSV, true
	case "application/x-ndjson", "application/ndjson":
		return NDJSON, true
	case "text/plain":
		return Text, true
	}
	return "", false
}

// InputError is a problem with the uploaded file itself; Line is the 1-based line of the file
// where it was found, 0 when it is about the file as a whole. Nothing of such an upload is kept.
type InputError struct {
	Line int
	Msg  string
}

func (e *InputError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// TooManyRowsError is an upload with more rows than the limit allows (413).
type TooManyRowsError struct{ Limit int }

func (e *TooManyRowsError) Error() string {
	return fmt.Sprintf("the list has more than %d rows", e.Limit)
}

// Row is one data row of an upload: its 1-based number among the data rows, the address it
// holds (normalised) and its original columns, which the results repeat.
type Row struct {
	No    int
	Email string
	Cols  []string
}

// Normalize is the form in which addresses are compared: duplicates after it are verified and
// billed once. Case is folded in the local part as well: mailbox providers that matter treat
// it case-insensitively, and a list with both cases of one address is one customer, twice.
func Normalize(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// MaxAddressBytes bounds the form in which a list stores and compares an address: far above any
// address (the syntax check refuses more than 1,016 bytes), far below what a Postgres index entry
// can hold (about 2.7 KB), which a cell of kilobytes in the email column would otherwise pass,
// failing the whole upload.
const MaxAddressBytes = 1024

// addressKey is the normalised address n (Normalize), cut at MaxAddressBytes when longer (at a
// character boundary) and followed by "…" and the SHA-256 of the whole, in hex: still no address
// (the verifier answers invalid, invalid_syntax), and still one per distinct cell (docs/lists.md,
// "Duplicates").
func addressKey(n string) string {
	if len(n) <= MaxAddressBytes {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	cut := MaxAddressBytes
	for cut > 0 && !utf8.RuneStart(n[cut]) {
		cut--
	}
	return n[:cut] + "…" + hex.EncodeToString(sum[:])
}

// Reader reads the rows of an upload one at a time, never holding the file whole. It refuses
// what cannot be read unambiguously — a bad encoding, a ragged CSV row, an over-long line, a
// line that is not a JSON object — with an *InputError naming the line.
type Reader struct {
	format  Format
	lines   *lineReader
	csv     *csv.Reader
	columns []string
	emailAt int
	maxRows int
	rows    int
	sawAt   bool
}

// Limits bound an upload.
type Limits struct {
	MaxRows      int // data rows
	MaxLineBytes int // one physical line of the file
}

// MaxColumns bounds a CSV header (docs/lists.md, "Limits"). Every list summary repeats the
// columns, so a header of tens of thousands of empty names, which fits in one line, would make
// every listing of the account's lists that large.
const MaxColumns = 1000

// NewReader starts reading an upload of format f. For CSV it reads the header row (after a
// separator line, sepLine) and picks the email column: the one named column (case-insensitive),
// else one named email or email address, else the one pickColumn finds.
func NewReader(r io.Reader, f Format, column string, lim Limits) (*Reader, error) {
	lr := newLineReader(r, lim.MaxLineBytes)
	rd := &Reader{format: f, lines: lr, maxRows: lim.MaxRows}
	if err := lr.skipBOM(); err != nil {
		return nil, err
	}
	lr.lineEnds()
	switch f {
	case NDJSON, Text:
		if column != "" && !strings.EqualFold(column, "email") {
			return nil, &InputError{Msg: fmt.Sprintf("column %q: only CSV uploads have named columns; leave column out", safetext.Cut(column))}
		}
		rd.columns = []string{"email"}
		return rd, nil
	case CSV:
	default:
		return nil, fmt.Errorf("unknown list format %q", f)
	}
	rd.csv = csv.NewReader(lr)
	head := lr.head()
	hline := 1 // the header's line: 2 after a separator line
	comma, ok := sepLine(head)
	if ok {
		// Read through encoding/csv, so that the lines it names in errors stay the file's.
		rd.csv.Comma, rd.csv.FieldsPerRecord = comma, -1
		if _, err := rd.csv.Read(); err != nil {
			return nil, rd.csvError(err)
		}
		hline = 2
	} else {
		comma = delimiter(head)
	}
	rd.csv.Comma = comma
	rd.csv.FieldsPerRecord = 0 // every row must have as many fields as the header
	header, err := rd.csv.Read()
	if errors.Is(err, io.EOF) {
		return nil, &InputError{Msg: "the file is empty; send a header row and at least one row"}
	}
	if err != nil {
		return nil, rd.csvError(err)
	}
	if len(header) > MaxColumns {
		return nil, &InputError{Line: hline, Msg: fmt.Sprintf("the header has %d columns; a list may have at most %d", len(header), MaxColumns)}
	}
	for i, h := range header {
		if err := checkText(h); err != nil {
			return nil, &InputError{Line: hline, Msg: fmt.Sprintf("header column %d %s", i+1, err)}
		}
	}
	rd.columns = header
	rd.emailAt = -1
	if column != "" {
		for i, h := range header {
			if strings.EqualFold(strings.TrimSpace(h), strings.TrimSpace(column)) {
				rd.emailAt = i
				break
			}
		}
		if rd.emailAt < 0 {
			return nil, &InputError{Line: hline, Msg: fmt.Sprintf("the header has no column %q; its columns are %s", safetext.Cut(column), quoteSome(header))}
		}
	} else {
		named, exact := emailColumns(header)
		// No column is named like an email column: a header row holding an address in any of
		// its cells is a first data row, such as a headerless export with names first.
		for i := 0; len(named) == 0 && i < len(header); i++ {
			if strings.Contains(header[i], "@") {
				return nil, headerIsData(hline)
			}
		}
		if exact {
			rd.emailAt = named[0]
		} else {
			rd.emailAt = pickColumn(named, addressColumns(head, comma, hline, len(header)))
		}
	}
	if strings.Contains(header[rd.emailAt], "@") {
		return nil, headerIsData(hline)
	}
	return rd, nil
}

// headerIsData refuses a CSV whose header, on line, is an address: a file without a header row.
func headerIsData(line int) error {
	return &InputError{Line: line, Msg: "the first line holds an address, not column names; add a header row (e.g. email) or upload the file as text/plain"}
}

// sepLine reads the separator line a file may begin with, "sep=;" (any case): spreadsheets take
// it as the file's separator, and exports meant for them write it. Read as a header, it would
// become the file's only column names, and the real header a row of invalid addresses. Only the
// separators a CSV upload can have count (docs/lists.md, "Uploading").
func sepLine(head []byte) (rune, bool) {
	line, _, _ := bytes.Cut(head, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) != 5 || !bytes.EqualFold(line[:4], []byte("sep=")) || !bytes.ContainsRune([]byte(separators), rune(line[4])) {
		return 0, false
	}
	return rune(line[4]), true
}

// separators are the field separators of a CSV upload, the comma first.
const separators = ",;\t|"

// pickColumn is the email column of a header without one named email or email address. Among
// named, the columns whose names say email, mail or address in the order of emailColumns, it is
// the first whose cells in the file's first rows hold an address (hasAt): a Google Contacts
// export's "E-mail 1 - Value" rather than its "E-mail 1 - Label"; else the first of them. A
// header that names none (a French "courriel") has its first column holding an address taken,
// else its first column (refused at the end if it holds no address either).
func pickColumn(named []int, hasAt []bool) int {
	candidates := named
	if len(candidates) == 0 {
		candidates = make([]int, len(hasAt))
		for i := range candidates {
			candidates[i] = i
		}
	}
	for _, i := range candidates {
		if hasAt[i] {
			return i
		}
	}
	if len(named) > 0 {
		return named[0]
	}
	return 0
}

// sampleRows bounds how many of a file's first rows pickColumn looks at.
const sampleRows = 100

// addressColumns says, for each of a CSV's n columns, whether one of its cells in the first data
// rows that head holds (sampleRows at most) contains an "@". head is read from its start, its
// first skip records (a separator line, the header) left out. A row cut off by the end of head
// counts as far as it goes; one encoding/csv refuses ends the sample (the refusal comes with its
// line when the row is read).
func addressColumns(head []byte, comma rune, skip, n int) []bool {
	hasAt := make([]bool, n)
	cr := csv.NewReader(bytes.NewReader(head))
	cr.Comma, cr.FieldsPerRecord = comma, -1
	for i := 0; i < skip; i++ {
		if _, err := cr.Read(); err != nil {
			return hasAt
		}
	}
	for k := 0; k < sampleRows; k++ {
		rec, err := cr.Read()
		if err != nil {
			break
		}
		for i, cell := range rec {
			if i < n && strings.Contains(cell, "@") {
				hasAt[i] = true
			}
		}
	}
	return hasAt
}

// delimiter is the field separator of a CSV upload, read from its header row, the first record
// of head: a comma, unless the header splits on one of a semicolon, a tab and a pipe and on
// nothing else. A spreadsheet saving CSV where the comma is the decimal separator (most of
// Europe) writes semicolons, a tab-separated export is often sent as CSV, and database tools and
// some CRMs export with pipes; read with commas, every row of such a file would be one column of
// invalid addresses. Whether a candidate splits the header
// depends on the quoting it implies, so each is tried as encoding/csv would read it: a ';'
// inside a quoted header cell of a comma file does not count. Nor does one that the first data
// row does not split on at all: a one-column comma file whose header is "Email (work; home)" or
// ends in a stray ';' stays a comma file. A header that splits on a comma, or on two of the
// others, keeps the comma (docs/lists.md, "Uploading").
func delimiter(head []byte) rune {
	splits := func(d rune) bool {
		cr := csv.NewReader(bytes.NewReader(head))
		cr.Comma, cr.FieldsPerRecord = d, -1
		header, err := cr.Read()
		if err != nil || len(header) < 2 {
			return false
		}
		row, err := cr.Read()
		// No data row in head: the header decides. A first row of more than one field keeps
		// the candidate even when it has not the header's number (the ragged row is refused
		// with its line, as it should be, rather than read as one column of whole lines).
		return err != nil || len(row) > 1
	}
	if splits(',') {
		return ','
	}
	found := rune(0)
	for _, d := range separators[1:] {
		if !splits(d) {
			continue
		}
		if found != 0 {
			return ','
		}
		found = d
	}
	if found == 0 {
		return ','
	}
	return found
}

// emailColumns are the headers that name an email column, the likeliest first: a column named
// email or email address (exact is true when there is one: it comes first), then those whose
// names say email, then mail, then address, each in the header's order. A CRM export's "Email
// Opt Out" or postal "Address" often comes before its "Email".
func emailColumns(header []string) (named []int, exact bool) {
	names := make([]string, len(header))
	for i, h := range header {
		n := strings.ToLower(strings.TrimSpace(h))
		names[i] = strings.NewReplacer("-", "", "_", "", " ", "").Replace(n)
	}
	for tier, matches := range []func(string) bool{
		func(n string) bool { return n == "email" || n == "emailaddress" },
		func(n string) bool { return strings.Contains(n, "email") },
		func(n string) bool { return n == "mail" },
		func(n string) bool { return n == "address" },
	} {
		for i, n := range names {
			if matches(n) && !slices.Contains(named, i) {
				named = append(named, i)
			}
		}
		if tier == 0 {
			exact = len(named) > 0
		}
	}
	return named, exact
}

// Columns are the upload's column names; EmailColumn is the index of the one verified.
func (r *Reader) Columns() []string { return r.columns }

// EmailColumn is the index in Columns of the address column.
func (r *Reader) EmailColumn() int { return r.emailAt }

// Rows is how many data rows Next has returned so far.
func (r *Reader) Rows() int { return r.rows }

// Next returns the next data row, or io.EOF after the last. At the end it refuses a file with no
// rows, or whose address column holds no address at all (the wrong column, or no email column).
func (r *Reader) Next() (Row, error) {
	row, err := r.next()
	if errors.Is(err, io.EOF) {
		switch {
		case r.rows == 0:
			return Row{}, &InputError{Msg: "the file has no rows to verify"}
		case !r.sawAt:
			return Row{}, &InputError{Msg: fmt.Sprintf("column %q holds no email addresses; name the email column with ?column=", safetext.Cut(r.columns[r.emailAt]))}
		}
		return Row{}, io.EOF
	}
	if err != nil {
		return Row{}, err
	}
	if r.rows >= r.maxRows {
		return Row{}, &TooManyRowsError{Limit: r.maxRows}
	}
	r.rows++
	row.No = r.rows
	if strings.Contains(row.Email, "@") {
		r.sawAt = true
	}
	row.Email = addressKey(row.Email)
	return row, nil
}

func (r *Reader) next() (Row, error) {
	if r.format == CSV {
		rec, err := r.csv.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Row{}, io.EOF
			}
			return Row{}, r.csvError(err)
		}
		for i, f := range rec {
			if err := checkText(f); err != nil {
				line, _ := r.csv.FieldPos(i) // the line the cell starts on: a row may span lines
				return Row{}, &InputError{Line: line, Msg: fmt.Sprintf("column %q %s", safetext.Cut(r.columns[i]), err)}
			}
		}
		return Row{Email: Normalize(rec[r.emailAt]), Cols: rec}, nil
	}
	for {
		line, no, err := r.lines.line()
		if err != nil {
			return Row{}, err
		}
		text := strings.TrimSpace(string(line))
		if text == "" {
			continue // blank lines are not rows
		}
		if err := checkText(text); err != nil {
			return Row{}, &InputError{Line: no, Msg: "the line " + err.Error()}
		}
		if r.format == Text {
			return Row{Email: Normalize(text), Cols: []string{text}}, nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &obj); err != nil {
			return Row{}, &InputError{Line: no, Msg: `the line is not a JSON object like {"email": "ann@example.com"}`}
		}
		var email string
		raw, ok := obj["email"]
		if !ok || json.Unmarshal(raw, &email) != nil {
			return Row{}, &InputError{Line: no, Msg: `the object has no string field "email"`}
		}
		// The line was checked as raw bytes above, but escapes are only seen decoded: \u0000 is a
		// NUL, which Postgres cannot store, and encoding/json turns an escaped lone surrogate
		// (\ud800) into U+FFFD, an address other than the one sent.
		if _, err := jsontext.AppendUnquote(nil, bytes.TrimSpace(raw)); err != nil {
			return Row{}, &InputError{Line: no, Msg: `the "email" value holds a \u escape of a UTF-16 surrogate without its pair, which is no character`}
		}
		if strings.IndexByte(email, 0) >= 0 {
			return Row{}, &InputError{Line: no, Msg: `the "email" value contains a NUL character (U+0000)`}
		}
		// encoding/json takes the last of two "email" fields: which one was meant is a guess.
		// RFC 7493 (I-JSON) validation refuses a name given twice anywhere in the line, and
		// escapes that are no character in its other fields.
		if !jsontext.Value(text).IsValid() {
			return Row{}, &InputError{Line: no, Msg: `the object gives a field more than once, or holds a \u escape that is no character`}
		}
		return Row{Email: Normalize(email), Cols: []string{text}}, nil
	}
}

// csvError turns encoding/csv's errors into InputErrors naming the line.
func (r *Reader) csvError(err error) error {
	var pe *csv.ParseError
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		return ie
	case errors.As(err, &pe):
		msg := pe.Err.Error()
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			msg = fmt.Sprintf("the row does not have the header's %d columns", len(r.columns))
		}
		return &InputError{Line: pe.StartLine, Msg: msg}
	}
	return err
}

// checkText refuses what a verifier can never mean: invalid UTF-8 and NUL bytes.
func checkText(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8; save the file as UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return nil
}

// quotedColumns is how many of a header's columns a message names: a header may have 1,000.
const quotedColumns = 10

// quoteSome names the first quotedColumns of ss, each cut as every quoted value of a message
// (safetext.Cut), and how many more there are.
func quoteSome(ss []string) string {
	q := make([]string, 0, quotedColumns)
	for _, s := range ss[:min(len(ss), quotedColumns)] {
		q = append(q, fmt.Sprintf("%q", safetext.Cut(s)))
	}
	out := strings.Join(q, ", ")
	if more := len(ss) - len(q); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// lineReader passes a file through while counting its lines and refusing any line longer than
// max bytes, so that no row, however it is encoded, can make the API hold more than a line. For
// CSV (Read) it also follows the quoting, and refuses a row whose quoted cells span lines once its
// lines together are longer than max: an unclosed quote would otherwise make encoding/csv hold
// the rest of the file as one cell (docs/lists.md, "Limits").
type lineReader struct {
	r       *bufio.Reader
	max     int
	lineNo  int  // lines started so far
	lineLen int  // bytes of the current line so far
	cr      bool // the last byte read was a CR, not yet counted: a CRLF line end, or a CR inside the line
	quoted  bool // Read: inside a quoted CSV cell (an odd number of quotes since the row began)
	rowLine int  // Read: the line the current CSV row began on
	rowLen  int  // Read: bytes of the current CSV row's earlier lines, with their line breaks
}

// newLineReader buffers at least a whole line of max bytes and its line end, so that head sees
// the whole first line of any file that is not refused for it.
func newLineReader(r io.Reader, max int) *lineReader {
	size := 64 << 10
	if size < max+8 {
		size = max + 8
	}
	return &lineReader{r: bufio.NewReaderSize(r, size), max: max, lineNo: 1, rowLine: 1}
}

// head is the start of what is left of the file, as much as the buffer holds, without consuming
// any of it.
func (l *lineReader) head() []byte {
	b, _ := l.r.Peek(l.r.Size())
	return b
}

// lineEnds makes a file whose lines end in a lone CR (Excel's "CSV (Macintosh)", old Mac text
// files) read as if they ended in LF: read as it is, all its lines are one, a line of joined
// addresses. Such a file is known by its first line end: a CR not followed by LF before any LF.
// In it every lone CR is a line end, one inside a quoted CSV cell too, which the cell then holds
// as LF; encoding/csv already gives a cell's CRLF as LF, and a cell with a line break is no
// address either way. A file whose first line ends in LF or CRLF is read unchanged.
func (l *lineReader) lineEnds() {
	head, err := l.r.Peek(l.r.Size())
	i := bytes.IndexAny(head, "\r\n")
	switch {
	case i < 0 || head[i] == '\n':
		return
	case i+1 < len(head) && head[i+1] == '\n':
		return
	case i+1 == len(head) && err == nil:
		return // the CR ends a full buffer: its line is over the limit, and refused as such
	}
	l.r = bufio.NewReaderSize(crToLF{l.r}, l.r.Size())
}

// crToLF turns each CR of r that is not followed by LF into LF.
type crToLF struct{ r *bufio.Reader }

func (c crToLF) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i, b := range p[:n] {
		if b != '\r' {
			continue
		}
		if i+1 < n {
			if p[i+1] != '\n' {
				p[i] = '\n'
			}
			continue
		}
		// The CR ends this read: the next byte decides. A read error other than the end of the
		// file leaves the CR as it is; the next Read returns the error.
		next, perr := c.r.Peek(1)
		if len(next) == 1 && next[0] != '\n' || len(next) == 0 && errors.Is(perr, io.EOF) {
			p[i] = '\n'
		}
	}
	return n, err
}

// skipBOM drops a UTF-8 byte-order mark (spreadsheets write one) and refuses UTF-16 files, with
// a byte-order mark or without one (utf16Head).
func (l *lineReader) skipBOM() error {
	head, _ := l.r.Peek(64)
	switch {
	case bytes.HasPrefix(head, []byte{0xEF, 0xBB, 0xBF}):
		_, _ = l.r.Discard(3)
	case bytes.HasPrefix(head, []byte{0xFF, 0xFE}), bytes.HasPrefix(head, []byte{0xFE, 0xFF}):
		return &InputError{Line: 1, Msg: "the file is UTF-16; save it as UTF-8"}
	case utf16Head(head):
		return &InputError{Line: 1, Msg: "the file is UTF-16 (without a byte-order mark); save it as UTF-8"}
	}
	for _, m := range binaryFiles {
		if bytes.HasPrefix(head, []byte(m.magic)) {
			return &InputError{Line: 1, Msg: m.msg}
		}
	}
	return nil
}

// binaryFiles are the files most often sent instead of a text export, by their first bytes: a
// workbook uploaded as it was saved, or a compressed file. Read as text they would be refused
// for a NUL byte or for not being UTF-8, which does not say what to do (docs/lists.md, "Bad
// input").
var binaryFiles = []struct{ magic, msg string }{
	{"PK\x03\x04", "the file is a ZIP archive, such as an Excel workbook (.xlsx) or an OpenDocument sheet (.ods); export the sheet as CSV (UTF-8) and upload that"},
	{"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1", "the file is an Excel 97-2003 workbook (.xls); export the sheet as CSV (UTF-8) and upload that"},
	{"\x1F\x8B", "the file is gzip-compressed; upload it uncompressed"},
}

// utf16Head reports whether a file's first bytes read as UTF-16 text without a byte-order mark:
// every pair of bytes has a NUL on the same side (the high byte of an ASCII character) and only
// there. Such a file would otherwise be refused for "a NUL byte", which does not say what to do.
// Two pairs at least: a shorter head says nothing.
func utf16Head(head []byte) bool {
	n := len(head) &^ 1
	if n < 4 {
		return false
	}
	le, be := true, true
	for i := 0; i < n; i += 2 {
		lo, hi := head[i], head[i+1]
		le = le && lo != 0 && hi == 0
		be = be && lo == 0 && hi != 0
	}
	return le || be
}

// Read implements io.Reader for encoding/csv, one buffered slice at a time. Quotes are counted
// as RFC 4180 has them: a quoted cell's escaped quote ("") is two, so a row ends at the first
// line end after an even number of them. A stray quote in an unquoted cell, which this count
// gets wrong, is refused by encoding/csv on its own line.
func (l *lineReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, b := range p[:n] {
		switch {
		case b == '\n':
			// A CR just before it is part of the line end (CRLF), not of the line.
			l.lineNo++
			if l.quoted {
				l.rowLen += l.lineLen + 1 // a line break inside a quoted cell
			} else {
				l.rowLen, l.rowLine = 0, l.lineNo
			}
			l.lineLen, l.cr = 0, false
			continue
		case l.cr:
			l.lineLen++ // the CR before this byte was inside the line
		}
		if b == '"' {
			l.quoted = !l.quoted
		}
		l.cr = b == '\r'
		if !l.cr {
			l.lineLen++
		}
		if l.lineLen > l.max {
			return 0, &InputError{Line: l.lineNo, Msg: fmt.Sprintf("the line is longer than %d bytes", l.max)}
		}
		if l.rowLen+l.lineLen > l.max {
			return 0, &InputError{Line: l.rowLine, Msg: fmt.Sprintf("the row that starts on this line is longer than %d bytes over its lines: "+
				"a quoted cell spans them; if a quote (\") is not closed, close it or double it (\"\")", l.max)}
		}
	}
	return n, err
}

// line returns the next line without its end-of-line bytes, and its number.
func (l *lineReader) line() ([]byte, int, error) {
	var buf []byte
	no := l.lineNo
	for {
		chunk, err := l.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		// The limit counts the line's bytes without its end (LF or CRLF), as Read does for CSV.
		tooLong := &InputError{Line: no, Msg: fmt.Sprintf("the line is longer than %d bytes", l.max)}
		if len(buf) > l.max+2 {
			return nil, no, tooLong
		}
		switch {
		case err == nil, errors.Is(err, io.EOF) && len(buf) > 0:
			if len(bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))) > l.max {
				return nil, no, tooLong
			}
			l.lineNo++
			return bytes.TrimRight(buf, "\r\n"), no, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, no, err
		}
	}
}
