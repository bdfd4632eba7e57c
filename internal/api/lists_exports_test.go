package api

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// exportRows uploads file as text/csv, waits for its list to complete and answers the upload's
// answer and the escape_formulas=false download's records (the cells as stored, no byte-order
// mark).
func (b *verifyBundle) exportRows(key, file string) (map[string]any, [][]string) {
	b.t.Helper()
	r := b.upload(key, "text/csv", "", file).want(b.t, http.StatusAccepted, "")
	b.waitList(key, r.body["id"].(string), "completed")
	_, body := b.download(key, r.body["id"].(string), "?escape_formulas=false")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		b.t.Fatalf("results are not CSV: %v\n%s", err, body)
	}
	return r.body, recs
}

// inputAndStatus is each record's first n cells (the input's columns) and its status.
func inputAndStatus(recs [][]string, n int) string {
	var out []string
	for _, rec := range recs {
		out = append(out, fmt.Sprintf("%q", append(rec[:n:n], rec[n])))
	}
	return strings.Join(out, "\n")
}

// A pipe-separated export ("Name|Email|City", what several CRMs and database tools write) is read
// by its columns, as semicolon and tab files are (docs/lists.md, "CSV separator"): read with
// commas, each line would be one address-like cell, and every row would come back invalid.
func TestListPipeSeparatedFileIsReadByColumn(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	up, recs := b.exportRows(key, "Name|Email|City\r\nAnn|ann@acme.test|\"Paris|FR\"\r\nBob|bob@acme.test|Oslo\r\n")
	if up["email_column"] != "Email" || fmt.Sprint(up["columns"]) != "[Name Email City]" || up["rows"] != 2.0 {
		t.Fatalf("upload %v", up)
	}
	want := `["Name" "Email" "City" "status"]
["Ann" "ann@acme.test" "Paris|FR" "deliverable"]
["Bob" "bob@acme.test" "Oslo" "deliverable"]`
	if got := inputAndStatus(recs, 3); got != want {
		t.Errorf("results\n%s\nwant\n%s", got, want)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Billable != 2 {
		t.Errorf("counts %+v, want the 2 addresses billed", c)
	}
	// A header that splits on both a pipe and a semicolon is ambiguous, and keeps the comma.
	r := b.upload(key, "text/csv", "", "a|b;email\nx|y;ann@acme.test\n").want(t, http.StatusAccepted, "")
	if fmt.Sprint(r.body["columns"]) != "[a|b;email]" {
		t.Errorf("ambiguous header read as %v", r.body["columns"])
	}
}

// A file that begins with Excel's separator line ("sep=;") is read with that separator and its
// header on the next line; the lines an error names are the file's own (docs/lists.md, "CSV
// separator"). Read as the header, the line would be the only column names ("sep=", ""): the file
// would be refused for a ragged row, or, with two columns, its real header verified (and counted)
// as an invalid address.
func TestListSeparatorLineSetsTheSeparator(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, key := b.customer(plan.Free)
	up, recs := b.exportRows(key, "SEP=;\r\nNom;E-mail;Ville\r\nAnn;ann@acme.test;Paris, FR\r\n")
	if up["email_column"] != "E-mail" || fmt.Sprint(up["columns"]) != "[Nom E-mail Ville]" || up["rows"] != 1.0 {
		t.Fatalf("upload %v", up)
	}
	want := `["Nom" "E-mail" "Ville" "status"]
["Ann" "ann@acme.test" "Paris, FR" "deliverable"]`
	if got := inputAndStatus(recs, 3); got != want {
		t.Errorf("results\n%s\nwant\n%s", got, want)
	}
	_, recs = b.exportRows(key, "sep=|\nemail|name\nbob@acme.test|Bob\n")
	if got := inputAndStatus(recs, 2); got != "[\"email\" \"name\" \"status\"]\n[\"bob@acme.test\" \"Bob\" \"deliverable\"]" {
		t.Errorf("sep=| results\n%s", got)
	}
	for _, c := range []struct {
		file string
		line float64
		says string
	}{
		{"sep=;\nemail;name\nann@acme.test;Ann\nbob@acme.test\n", 4, "header's 2 columns"},
		{"sep=,\nann@acme.test,Ann\n", 2, "the first line holds an address"},
		{"sep=;\nname;email\xe9\nAnn;ann@acme.test\n", 2, "header column 2 is not valid UTF-8"},
	} {
		r := b.upload(key, "text/csv", "", c.file).want(t, http.StatusBadRequest, "invalid_request")
		if msg, _ := r.body["message"].(string); r.body["line"] != c.line || !strings.Contains(msg, c.says) {
			t.Errorf("%q: line %v %q, want line %v saying %q", c.file, r.body["line"], msg, c.line, c.says)
		}
	}
}

// A header whose email column has a name the rules do not know (a French "courriel"), or that
// names several (Google Contacts' "E-mail 1 - Label" before "E-mail 1 - Value"), has the column
// that holds the addresses verified (docs/lists.md, "Uploading"). Taking the first column, or the
// first named, would refuse the upload for a column without addresses, or verify its rows on the
// wrong column.
func TestListEmailColumnIsTheOneHoldingAddresses(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Builder)
	for _, c := range []struct{ file, column string }{
		{"Nom;Courriel;Ville\nAnn;ann@acme.test;Paris\nBob;;Lyon\n", "Courriel"},
		{"Name,E-mail 1 - Label,E-mail 1 - Value\nAnn,* Home,ann@acme.test\nBob,,\n", "E-mail 1 - Value"},
		{"Email Opt Out,Contact Email\n0,ann@acme.test\n", "Contact Email"},
		// A column named email or email address is the column, whatever the others hold.
		{"Notes,Email\nann@acme.test,\nx,bob@acme.test\n", "Email"},
		// An address that appears only in a column named like none is no reason to take it over
		// a named one.
		{"Address,Note\n1 Main St,ann@acme.test\n", "Address"},
	} {
		r := b.upload(key, "text/csv", "", c.file)
		if c.column == "Address" {
			r.want(t, http.StatusBadRequest, "invalid_request")
			continue
		}
		r.want(t, http.StatusAccepted, "")
		if r.body["email_column"] != c.column {
			t.Errorf("%q: email column %v, want %q", c.file, r.body["email_column"], c.column)
		}
	}
}

// The results CSV opens in Excel with its non-ASCII characters intact: the escaped download (the
// default, the dashboard's) begins with UTF-8's byte-order mark, without which Excel reads the
// file in the system's code page ("JosÃ©"). escape_formulas=false, for programs, has none
// (docs/lists.md, "Results"). Either way, every row of the upload comes back.
func TestListResultsCSVBeginsWithAByteOrderMarkForSpreadsheets(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Builder)
	file := "\ufeffNom;E-mail;Ville\r\nJosé;jose@acme.test;Zürich\r\nZoë;;Kraków\r\n"
	r := b.upload(key, "text/csv", "", file).want(t, http.StatusAccepted, "")
	id := r.body["id"].(string)
	for _, c := range []struct {
		query string
		bom   bool
	}{{"", true}, {"?format=csv&escape_formulas=true", true}, {"?escape_formulas=false", false}} {
		resp, body := b.download(key, id, c.query)
		if resp.StatusCode != http.StatusOK || strings.HasPrefix(body, list.ByteOrderMark) != c.bom {
			t.Errorf("download %q: %d, begins with a byte-order mark: %v, want %v", c.query, resp.StatusCode, !c.bom, c.bom)
		}
		recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(body, list.ByteOrderMark))).ReadAll()
		if err != nil || len(recs) != 3 || strings.Join(recs[0][:3], ",") != "Nom,E-mail,Ville" ||
			strings.Join(recs[1][:3], ",") != "José,jose@acme.test,Zürich" || strings.Join(recs[2][:3], ",") != "Zoë,,Kraków" {
			t.Errorf("download %q: %v %q", c.query, err, recs)
		}
	}
	if _, body := b.download(key, id, "?format=ndjson"); strings.HasPrefix(body, list.ByteOrderMark) {
		t.Errorf("NDJSON begins with a byte-order mark")
	}
}
