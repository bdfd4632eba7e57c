package list

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/verdict"
)

// ResultColumns are the result fields a CSV download appends to the input's columns, named as
// in the API's result object (docs/lists.md, "Results"). The address itself is the input's. The
// nested smtp_reply is flattened into the last three, smtp_code, smtp_enhanced_code and
// smtp_text, so that a spreadsheet shows each in a column of its own.
var ResultColumns = []string{"status", "reason", "valid", "confidence", "failed_check", "disposable", "role",
	"free_provider", "catch_all", "smtp_blocked", "mx_found", "mx_host", "suggestion",
	"smtp_code", "smtp_enhanced_code", "smtp_text"}

// ByteOrderMark begins an escaped CSV download (EscapeFormulas): UTF-8's byte-order mark, EF BB BF.
const ByteOrderMark = "\ufeff"

// Export writes a list's rows in input order, each with its result, as CSV or NDJSON (out is
// CSV or NDJSON). Rows not verified yet (the list is still running) have empty result columns,
// or "result": null; statuses, when not empty, keeps only rows verified with one of them.
// formulas applies to CSV only (an escaped CSV also begins with ByteOrderMark): NDJSON values are
// JSON strings no spreadsheet evaluates. flush is called every few hundred rows so that a large
// download streams.
func (s *Store) Export(ctx context.Context, l List, out Format, statuses []string, formulas Formulas, w io.Writer, flush func()) error {
	ctx, cancel := bulk(ctx)
	defer cancel()
	var filter []string
	if len(statuses) > 0 {
		filter = statuses
	}
	rows, err := s.db.Query(ctx, `SELECT r.cols, a.result FROM list_rows r
		JOIN list_addresses a ON a.list_id = r.list_id AND a.email = r.email
		WHERE r.list_id = $1 AND ($2::text[] IS NULL OR a.status = ANY($2))
		ORDER BY r.row_no`, l.ID, filter)
	if err != nil {
		return err
	}
	defer rows.Close()
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := exporter{list: l, w: bw, keys: jsonKeys(l)}
	if out == CSV {
		if formulas == EscapeFormulas {
			// The escaped download is the file a person opens: Excel reads a CSV without a
			// byte-order mark in the system's legacy code page, so every non-ASCII character of
			// the customer's data would show as mojibake ("JosÃ©"). escape_formulas=false is
			// for programs, which get the cells alone (docs/lists.md, "Results").
			if _, err := bw.WriteString(ByteOrderMark); err != nil {
				return err
			}
		}
		enc.csv = newRecordWriter(csv.NewWriter(bw), formulas)
		header := append(append([]string{}, enc.inputColumns()...), ResultColumns...)
		if err := enc.csv.Write(header); err != nil {
			return err
		}
	}
	var (
		cols []string
		doc  []byte
		n    int
	)
	_, err = pgx.ForEachRow(rows, []any{&cols, &doc}, func() error {
		if err := enc.row(cols, doc); err != nil {
			return err
		}
		if n++; n%500 == 0 {
			if err := enc.flush(); err != nil {
				return err
			}
			flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return enc.flush()
}

// exporter writes the rows of one download.
type exporter struct {
	list List
	w    *bufio.Writer
	csv  recordWriter
	keys []string // an NDJSON line's keys for a CSV upload's columns (jsonKeys)
}

// resultKey is the key of the verify result on an NDJSON line.
const resultKey = "result"

// jsonKeys are the keys an NDJSON download gives a CSV upload's columns: their names, made unique
// so that every line is an object a JSON parser reads without losing a field — most keep the last
// of two equal keys. An empty name becomes column_N (N its position from 1); a name used by an
// earlier column, or result (the verify result's own key), gets the first free of _2, _3, … (docs/lists.md,
// "Results"). A file exported from another verification service often has a
// result column.
func jsonKeys(l List) []string {
	if l.Format != CSV {
		return []string{"email"}
	}
	// A column keeps its own name where it can, so a name is taken before any made-up one.
	used := map[string]bool{resultKey: true}
	keys := make([]string, len(l.Columns))
	for i, name := range l.Columns {
		if name != "" && !used[name] {
			keys[i], used[name] = name, true
		}
	}
	for i, name := range l.Columns {
		if keys[i] != "" {
			continue
		}
		if name == "" {
			name = "column_" + strconv.Itoa(i+1)
		}
		keys[i] = uniqueKey(name, used)
		used[keys[i]] = true
	}
	return keys
}

// uniqueKey is name, or name_2, name_3, … : the first that used does not hold.
func uniqueKey(name string, used map[string]bool) string {
	key := name
	for n := 2; used[key]; n++ {
		key = name + "_" + strconv.Itoa(n)
	}
	return key
}

// inputColumns are the CSV columns of the input: a CSV's own header; "email" for the others.
func (e exporter) inputColumns() []string {
	if e.list.Format == CSV {
		return e.list.Columns
	}
	return []string{"email"}
}

func (e exporter) flush() error {
	if e.csv != nil {
		e.csv.Flush()
		if err := e.csv.Error(); err != nil {
			return err
		}
	}
	return e.w.Flush()
}

func (e exporter) row(cols []string, doc []byte) error {
	var r *verdict.Result
	if doc != nil {
		r = new(verdict.Result)
		if err := json.Unmarshal(doc, r); err != nil {
			return fmt.Errorf("stored result: %w", err)
		}
	}
	if e.csv != nil {
		rec := append(e.inputValues(cols), resultValues(r)...)
		return e.csv.Write(rec)
	}
	if r != nil {
		// Written again rather than passed through: Postgres keeps jsonb with its own key order
		// and spacing, and the result should read as every other response's does.
		var err error
		if doc, err = json.Marshal(r); err != nil {
			return err
		}
	}
	return e.jsonRow(cols, doc)
}

// inputValues are a row's values for inputColumns.
func (e exporter) inputValues(cols []string) []string {
	switch e.list.Format {
	case CSV:
		return cols
	case NDJSON:
		// The field the upload verified (Reader.next): "email" exactly. A struct field would
		// also take an "Email" or "EMAIL" of the line, whichever comes last.
		var obj map[string]json.RawMessage
		var email string
		_ = json.Unmarshal([]byte(cols[0]), &obj) // validated at upload
		_ = json.Unmarshal(obj["email"], &email)
		return []string{email}
	}
	return cols
}

// jsonRow writes one NDJSON line: the input's fields (a CSV row's columns by name, an NDJSON
// line's own object, a text line as email), then "result".
func (e exporter) jsonRow(cols []string, doc []byte) error {
	if doc == nil {
		doc = []byte("null")
	}
	var b strings.Builder
	switch e.list.Format {
	case NDJSON:
		obj := strings.TrimSpace(cols[0])
		// Cheap tests first: a key "result" is written as such, or with \u escapes.
		if strings.Contains(obj, `"`+resultKey+`"`) || strings.Contains(obj, `\u`) {
			obj = renameResultKey(obj)
		}
		obj = strings.TrimSpace(strings.TrimSuffix(obj, "}"))
		b.WriteString(obj)
		if obj != "{" {
			b.WriteByte(',')
		}
	default:
		b.WriteByte('{')
		for i, v := range cols {
			k, _ := json.Marshal(e.keys[i])
			val, _ := json.Marshal(v)
			b.Write(k)
			b.WriteByte(':')
			b.Write(val)
			b.WriteByte(',')
		}
	}
	b.WriteString(`"result":`)
	b.Write(doc)
	b.WriteString("}\n")
	_, err := e.w.WriteString(b.String())
	return err
}

// renameResultKey gives an uploaded NDJSON object's own top-level result field the first free key
// of result_2, result_3, …, so that the line's result key is the verify result's alone (as
// jsonKeys does for a CSV column named result). The values, and every other field, are written
// as uploaded; an object without such a field is returned unchanged.
func renameResultKey(obj string) string {
	type field struct {
		key string
		val json.RawMessage
	}
	var fields []field
	dec := json.NewDecoder(strings.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return obj
	}
	found := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return obj
		}
		key, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return obj // validated at upload; never expected
		}
		found = found || key == resultKey
		fields = append(fields, field{key, val})
	}
	if !found {
		return obj // "result" was a value, or inside a nested object
	}
	used := map[string]bool{}
	for _, f := range fields {
		used[f.key] = true
	}
	renamed := uniqueKey(resultKey, used)
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		key := f.key
		if key == resultKey {
			key = renamed
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.String()
}

// resultValues are a result's values for ResultColumns; empty for a row not verified yet.
func resultValues(r *verdict.Result) []string {
	if r == nil {
		return make([]string, len(ResultColumns))
	}
	opt := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	fc := ""
	if r.FailedCheck != nil {
		fc = string(*r.FailedCheck)
	}
	var code, enhanced, text string
	if rep := r.SMTPReply; rep != nil {
		code, enhanced, text = strconv.Itoa(rep.Code), opt(rep.EnhancedCode), rep.Text
	}
	b := strconv.FormatBool
	return []string{string(r.Status), string(r.Reason), b(r.Valid), strconv.FormatFloat(r.Confidence, 'f', -1, 64), fc,
		b(r.Disposable), b(r.Role), b(r.FreeProvider), b(r.CatchAll), b(r.SMTPBlocked), b(r.MXFound), opt(r.MXHost), opt(r.Suggestion),
		code, enhanced, text}
}

// ListID parses a list id from a path; anything but a UUID is not found.
func ListID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, ErrNotFound
	}
	return id, nil
}
