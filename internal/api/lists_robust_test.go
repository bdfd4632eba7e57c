package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// Real-world and hostile CSV files through the upload route: a quote left open, a quoted cell
// too long over its lines, a headerless export with the address in a later column. Each is
// refused whole with its line in the error envelope, and nothing is stored or charged
// (docs/lists.md, "Bad input").
func TestListUploadRefusesUnreadableCSVWithItsLine(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Free)
	short := strings.Repeat(strings.Repeat("x", 1000)+"\n", 200) // 200 KB of short lines
	for _, c := range []struct {
		name, file string
		line       float64
		says       string
	}{
		{"unclosed quote", "email,note\r\nann@acme.test,ok\r\nbob@acme.test,\"left open\r\n" + short + "zed@acme.test,z\r\n",
			3, "longer than 102400 bytes"},
		{"quoted cell over the limit", "email,note\nann@acme.test,\"" + short + "\"\n", 2, "longer than 102400 bytes"},
		{"headerless, address second", "Ann,ann@acme.test,Paris\nBob,bob@acme.test,Rome\n", 1, "add a header row"},
		{"workbook", "PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00b\xee\x9dh^\x01\x00\x00", 1, "export the sheet as CSV"},
	} {
		r := b.upload(key, "text/csv", "", c.file).want(t, http.StatusBadRequest, "invalid_request")
		msg, _ := r.body["message"].(string)
		if r.body["line"] != c.line || !strings.Contains(msg, c.says) || !strings.Contains(msg, "Nothing was stored or charged") {
			t.Errorf("%s: line %v, message %q; want line %v saying %q", c.name, r.body["line"], msg, c.line, c.says)
		}
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d lists stored of refused uploads", n)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota+c.Held != 0 {
		t.Errorf("refused uploads hold or use %+v", c)
	}
	// A quoted cell spanning lines within the limit is a cell: it comes back as it was.
	id := b.upload(key, "text/csv", "", "email,note\r\nann@acme.test,\"line one\r\nline two\"\r\n").
		want(t, http.StatusAccepted, "").body["id"].(string)
	_, body := b.download(key, id, "?escape_formulas=false")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][1] != "line one\nline two" {
		t.Errorf("multi-line cell: %q, %v", recs, err)
	}
}

// The row limit is exact: a file of exactly MAILVET_LIST_MAX_ROWS rows is admitted, blank lines
// and rows of blanks counted as the docs count them, and one more row is 413 with nothing stored.
// Duplicates in case and blanks are one unique address, held (and later billed) once.
func TestListRowLimitIsExactAndDuplicatesHoldOnce(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, env: map[string]string{"MAILVET_LIST_MAX_ROWS": "4"}})
	acct, key := b.customer(plan.Free)
	four := "email,n\r\nann@acme.test,1\r\n\r\n ANN@acme.test ,2\r\nAnn@Acme.Test,3\r\n\tbob@acme.test\t,4\r\n\r\n"
	r := b.upload(key, "text/csv", "", four).want(t, http.StatusAccepted, "")
	if r.body["rows"] != 4.0 || r.body["unique"] != 2.0 {
		t.Errorf("rows %v unique %v, want 4 and 2", r.body["rows"], r.body["unique"])
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota+c.Held != 2 {
		t.Errorf("held %+v, want the 2 unique addresses", c)
	}
	b.upload(key, "text/csv", "", four+"zed@acme.test,5\n").want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	b.upload(key, "text/plain", "", "a@acme.test\n \t \nb@acme.test\n\nc@acme.test\nd@acme.test\n\n").want(t, http.StatusAccepted, "")
	b.upload(key, "text/plain", "", "a@acme.test\nb@acme.test\nc@acme.test\nd@acme.test\ne@acme.test").
		want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 2 {
		t.Errorf("%d lists, want the 2 admitted", n)
	}
}

// A real-world export, end to end: a byte-order mark, semicolons, CRLF, a quoted note over two
// lines with escaped quotes, formula cells, one address four times (case and blanks differ), an
// empty email cell, a row of blanks. Every row comes back in order with its cells as uploaded
// (escaped only where docs/lists.md, "Formula cells", says), each unique address is verified and
// billed once, the syntax failures are not billable, and the hold is gone at the end.
func TestListMessyExportEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	file := "\ufeffName;E-mail;Note\r\n" +
		"Ann;ann@acme.test;\"said \"\"hi\"\"\r\nover two lines\"\r\n" +
		"Ann2; ANN@ACME.TEST ;\"=HYPERLINK(\"\"x\"\")\"\r\n" +
		"Ann3;Ann@Acme.Test;+33 1 23\r\n" +
		"Bob;bob@acme.test;-5\r\n" +
		"Empty;;@SUM(A1)\r\n" +
		"Blank;   ;\r\n" +
		"Ann4;\tann@acme.test\t;\"\rcr\"\r\n" +
		"Nobody;nobody@acme.test;\r\n"
	r := b.upload(key, "text/csv", "", file).want(t, http.StatusAccepted, "")
	id := r.body["id"].(string)
	if r.body["rows"] != 8.0 || r.body["unique"] != 4.0 || r.body["email_column"] != "E-mail" {
		t.Fatalf("upload %v", r.body)
	}
	l := b.waitList(key, id, "completed")
	if l["verified"] != 4.0 {
		t.Errorf("verified %v", l["verified"])
	}
	// ann, bob and nobody are billable; "" is one syntax failure, a quota unit but no bill.
	if c := usagetest.Of(t, b.pool, acct); c.Quota != 4 || c.Billable != 3 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("counts %+v, want 4 quota units, 3 billable, nothing held", c)
	}
	want := [][]string{
		{"Name", "E-mail", "Note", "deliverable"},
		{"Ann", "ann@acme.test", "said \"hi\"\nover two lines", "deliverable"},
		{"Ann2", " ANN@ACME.TEST ", "=HYPERLINK(\"x\")", "deliverable"},
		{"Ann3", "Ann@Acme.Test", "+33 1 23", "deliverable"},
		{"Bob", "bob@acme.test", "-5", "deliverable"},
		{"Empty", "", "@SUM(A1)", "invalid"},
		{"Blank", "   ", "", "invalid"},
		{"Ann4", "\tann@acme.test\t", "\rcr", "deliverable"},
		{"Nobody", "nobody@acme.test", "", "undeliverable"},
	}
	for _, q := range []string{"?escape_formulas=false", ""} {
		_, body := b.download(key, id, q)
		recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(body, list.ByteOrderMark))).ReadAll()
		if err != nil || len(recs) != len(want) {
			t.Fatalf("%s: %v, %d records\n%s", q, err, len(recs), body)
		}
		for i, w := range want {
			if i == 0 {
				w = w[:3]
			} else if q == "" {
				w = list.EscapeFormulaCells(w)
			}
			got := recs[i][:len(w)]
			if i == 0 {
				got = recs[i][:3]
			} else {
				got = append(got[:3:3], recs[i][3])
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", w) {
				t.Errorf("%s row %d: %q, want %q", q, i, got, w)
			}
		}
	}
}

// Canceled while it runs, then deleted, with real workers: what was written is billed once per
// address, what was not is neither written nor billed, the hold is gone, and the usage rows stay
// after the delete, without addresses (docs/lists.md, "Cancel and delete", "Metering").
func TestListCanceledWhileRunningBillsWhatWasWritten(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	var file strings.Builder
	for i := range 500 {
		fmt.Fprintf(&file, "u%d@acme.test\n U%d@ACME.test\n", i, i) // each twice: 500 unique
	}
	for i := range 200 {
		fmt.Fprintf(&file, "s%d@slow.test\n", i) // 700 ms a recipient: still running at the cancel
	}
	r := b.upload(key, "text/plain", "", file.String()).want(t, http.StatusAccepted, "")
	id := r.body["id"].(string)
	if r.body["unique"] != 700.0 || r.body["rows"] != 1200.0 {
		t.Fatalf("upload %v", r.body)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		l := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusOK, "").body
		if v, _ := l["verified"].(float64); v >= 500 {
			if v >= 700 {
				t.Fatalf("the list finished before the cancel: %v", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %v", l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l := b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", key, nil).want(t, http.StatusOK, "").body
	if l["state"] != "canceled" {
		t.Fatalf("cancel %v", l)
	}
	time.Sleep(6 * time.Second) // a worker stops probing within 5 s, and writes nothing
	written := b.count(`SELECT count(*) FROM list_addresses WHERE list_id = $1 AND result IS NOT NULL`, id)
	l = b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusOK, "").body
	if float64(written) != l["verified"] || written >= 700 || written < 500 {
		t.Errorf("written %d, verified %v", written, l["verified"])
	}
	b.settle()
	billed := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" })
	if c := usagetest.Of(t, b.pool, acct); billed != written || c.Billable != written || c.Held != 0 || c.Holds != 0 {
		t.Errorf("%d results written, %d usage rows, counts %+v", written, billed, c)
	}
	b.call(http.MethodDelete, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNoContent, "")
	b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNotFound, "list_not_found")
	if n := b.count(`SELECT count(*) FROM list_rows WHERE list_id = $1`, id) + b.count(`SELECT count(*) FROM list_addresses WHERE list_id = $1`, id); n != 0 {
		t.Errorf("%d rows left after delete", n)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Billable != written {
		t.Errorf("after delete: counts %+v, want the %d billed kept", c, written)
	}
}

// A download parameter sent twice is refused, not read as its first value: a client that sends
// status=deliverable&status=catch_all would otherwise get the deliverable rows alone, and take
// them for all it asked for (docs/lists.md, "Results").
func TestListResultsRefuseARepeatedParameter(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Builder)
	id := b.upload(key, "text/plain", "", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	for _, q := range []string{"?status=deliverable&status=catch_all", "?format=csv&format=ndjson",
		"?escape_formulas=true&escape_formulas=false"} {
		resp, body := b.download(key, id, q)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid_request"`) || !strings.Contains(body, "once") {
			t.Errorf("%s: %d %s", q, resp.StatusCode, body)
		}
	}
	if resp, _ := b.download(key, id, "?status=deliverable,catch_all&format=ndjson"); resp.StatusCode != http.StatusOK {
		t.Errorf("comma-separated statuses: %d", resp.StatusCode)
	}
}

// The list routes that take query parameters refuse one they do not know, as the upload does
// (docs/lists.md, "Results"): a mistyped filter (stauts=deliverable) would otherwise be read as
// no filter, and the whole file downloaded as if it were the rows asked for. An empty status= is refused for the
// same reason. A route that takes no parameters (GET /v1/email/lists/{id}) still ignores them
// (docs/api.md, "Conventions").
func TestListRoutesRefuseUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Builder)
	id := b.upload(key, "text/plain", "", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	for q, says := range map[string]string{
		"?stauts=deliverable":            `Unknown query parameter "stauts"; use format, status and escape_formulas.`,
		"?format=ndjson&Status=invalid":  `Unknown query parameter "Status"`,
		"?escape_formula=false":          `Unknown query parameter "escape_formula"`,
		"?status=":                       "Query parameter status is empty",
		"?status=deliverable&format=xls": "format must be csv or ndjson",
	} {
		resp, body := b.download(key, id, q)
		var env map[string]any
		_ = json.Unmarshal([]byte(body), &env)
		if msg, _ := env["message"].(string); resp.StatusCode != http.StatusBadRequest || env["error"] != CodeInvalidRequest || !strings.Contains(msg, says) {
			t.Errorf("results%s: %d %s, want 400 saying %q", q, resp.StatusCode, body, says)
		}
	}
	for q, says := range map[string]string{
		"?limt=10":           `Unknown query parameter "limt"; use limit and cursor.`,
		"?limit=10&page=2":   `Unknown query parameter "page"`,
		"?cursor=&status=ok": `Unknown query parameter "status"`,
	} {
		r := b.call(http.MethodGet, "/v1/email/lists"+q, key, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, says) {
			t.Errorf("lists%s: message %q, want %q", q, msg, says)
		}
	}
	if resp, _ := b.download(key, id, "?format=ndjson&status=deliverable,invalid&escape_formulas=true"); resp.StatusCode != http.StatusOK {
		t.Errorf("every known parameter: %d", resp.StatusCode)
	}
	b.call(http.MethodGet, "/v1/email/lists?limit=10", key, nil).want(t, http.StatusOK, "")
	b.call(http.MethodGet, "/v1/email/lists/"+id+"?verbose=1", key, nil).want(t, http.StatusOK, "")
}

// Deleted while it runs, with real workers and without a cancel first: the hold is released in
// the delete, nothing is written or billed after it (a worker's chunk of the deleted list is
// dropped), and every usage row is one of the addresses verified before it.
func TestListDeletedWhileRunningBillsNothingAfter(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	var file strings.Builder
	for i := range 300 {
		fmt.Fprintf(&file, "u%d@acme.test\n", i)
	}
	for i := range 100 {
		fmt.Fprintf(&file, "s%d@slow.test\n", i)
	}
	id := b.upload(key, "text/plain", "", file.String()).want(t, http.StatusAccepted, "").body["id"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for {
		l := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusOK, "").body
		if v, _ := l["verified"].(float64); v >= 250 {
			if v >= 400 {
				t.Fatalf("the list finished before the delete: %v", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %v", l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.call(http.MethodDelete, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNoContent, "")
	b.settle()
	billed := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" })
	if c := usagetest.Of(t, b.pool, acct); c.Held != 0 || c.Holds != 0 || c.Quota != billed || billed < 250 || billed >= 400 {
		t.Errorf("after the delete: %d usage rows, counts %+v", billed, c)
	}
	time.Sleep(6 * time.Second) // the chunk a worker was verifying comes back to a list that is gone
	b.settle()
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" }); n != billed {
		t.Errorf("%d usage rows after the delete, %d at it", n, billed)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota != billed || c.Held != 0 {
		t.Errorf("counts %+v, want %d units used and none held", c, billed)
	}
	if n := b.count(`SELECT count(*) FROM list_addresses WHERE list_id = $1`, id); n != 0 {
		t.Errorf("%d addresses of the deleted list", n)
	}
}

// An email cell of kilobytes is no address: a result (invalid, invalid_syntax), like any other
// invalid address in a good file (docs/lists.md, "Uploading"), not a 500 from an index that
// cannot hold it. Two such cells that differ stay two addresses; the row's cell comes back whole.
func TestListLongEmailCellIsAnInvalidResult(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	rng := rand.New(rand.NewPCG(3, 4))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	long := func(n int) string {
		s := make([]byte, n)
		for i := range s {
			s[i] = letters[rng.IntN(len(letters))]
		}
		return string(s) + "@acme.test"
	}
	a, c := long(8000), long(50000)
	file := "email\nann@acme.test\n" + a + "\n" + strings.ToUpper(a) + "\n" + c + "\n"
	r := b.upload(key, "text/csv", "", file).want(t, http.StatusAccepted, "")
	id := r.body["id"].(string)
	if r.body["rows"] != 4.0 || r.body["unique"] != 3.0 {
		t.Fatalf("upload %v", r.body)
	}
	l := b.waitList(key, id, "completed")
	byStatus, _ := l["counts"].(map[string]any)["by_status"].(map[string]any)
	if byStatus["invalid"] != 2.0 || byStatus["deliverable"] != 1.0 {
		t.Errorf("counts %v", byStatus)
	}
	_, body := b.download(key, id, "")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) != 5 || recs[2][0] != a || recs[3][0] != strings.ToUpper(a) || recs[4][0] != c ||
		recs[2][1] != "invalid" || recs[4][1] != "invalid" || recs[2][2] != "invalid_syntax" {
		t.Errorf("download: %v, %d records", err, len(recs))
	}
	if u := usagetest.Of(t, b.pool, acct); u.Quota != 3 || u.Billable != 1 || u.Held != 0 {
		t.Errorf("counts %+v, want 3 units, 1 billable", u)
	}
}

// A finished list past its expires_at is gone for its account at once (docs/lists.md, "States":
// after that time GET answers 404 list_not_found), whether or not a verifier's sweep has purged
// its rows yet: its results are personal data kept no longer than the retention.
func TestListPastItsExpiryIsNotFound(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true}) // no sweep: the rows stay in the database
	_, key := b.customer(plan.Builder)
	id := b.upload(key, "text/plain", "", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	keep := b.upload(key, "text/plain", "", "bob@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", key, nil).want(t, http.StatusOK, "")
	if _, err := b.pool.Exec(context.Background(), `UPDATE lists SET expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNotFound, "list_not_found")
	if resp, body := b.download(key, id, ""); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "list_not_found") {
		t.Errorf("results of an expired list: %d %s", resp.StatusCode, body)
	}
	page := b.call(http.MethodGet, "/v1/email/lists", key, nil).want(t, http.StatusOK, "").body
	ls, _ := page["lists"].([]any)
	if len(ls) != 1 || ls[0].(map[string]any)["id"] != keep {
		t.Errorf("listing: %v, want only %s", page, keep)
	}
}

// A list past its expires_at is gone on every route that names it, as GET is
// (TestListPastItsExpiryIsNotFound), before a verifier's sweep has purged it: cancel is
// 404 list_not_found, not 409 list_finished; DELETE is 404 as for a purged list and erases the
// rows at once; both result formats are 404; the listing pages past it; the account's export
// holds neither the list nor its callback's delivery, which a purge deletes with it
// (docs/lists.md, "States"; docs/personal-data.md, "Export").
func TestListPastItsExpiryIsGoneOnEveryRoute(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true}) // no sweep: the rows stay in the database
	a, mgmt := b.account(plan.Builder, "")
	key := b.standardKey(a.ID).Raw
	gone := b.upload(key, "text/plain", "", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	kept := b.upload(key, "text/plain", "", "bob@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	b.call(http.MethodPost, "/v1/email/lists/"+gone+"/cancel", key, nil).want(t, http.StatusOK, "")
	// A delivery of the list's callback, as the webhook workers leave it once delivered.
	pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, list_id, account_id, url, body, state, created_at, finished_at)
		VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example.com/l', convert_to('{}', 'UTF8'), 'delivered', now(), now())`, gone, a.ID)
	pgtest.Exec(t, b.pool, `UPDATE lists SET expires_at = now() - interval '1 second' WHERE id = $1`, gone)

	for _, format := range []string{"", "?format=csv", "?format=ndjson"} {
		if resp, body := b.download(key, gone, format); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "list_not_found") {
			t.Errorf("results%s of an expired list: %d %s", format, resp.StatusCode, body)
		}
	}
	b.call(http.MethodPost, "/v1/email/lists/"+gone+"/cancel", key, nil).want(t, http.StatusNotFound, "list_not_found")
	page := b.call(http.MethodGet, "/v1/email/lists?limit=1", key, nil).want(t, http.StatusOK, "").body
	if ls, _ := page["lists"].([]any); len(ls) != 1 || ls[0].(map[string]any)["id"] != kept || page["next_cursor"] != nil {
		t.Errorf("first page of one: %v, want only %s and no next page", page, kept)
	}
	page = b.call(http.MethodGet, "/v1/email/lists?limit=1&cursor="+kept, key, nil).want(t, http.StatusOK, "").body
	if ls, _ := page["lists"].([]any); len(ls) != 0 {
		t.Errorf("page after %s: %v, want none", kept, page)
	}

	ex := b.call(http.MethodGet, "/v1/management/account/export", mgmt, nil).want(t, http.StatusOK, "")
	var doc struct {
		Lists      []map[string]any `json:"lists"`
		Deliveries []map[string]any `json:"deliveries"`
	}
	mustOK(t, json.Unmarshal(ex.raw, &doc))
	if len(doc.Lists) != 1 || doc.Lists[0]["id"] != kept || len(doc.Deliveries) != 0 {
		t.Errorf("export: lists %v, deliveries %v; want only list %s and no delivery", doc.Lists, doc.Deliveries, kept)
	}

	b.call(http.MethodDelete, "/v1/email/lists/"+gone, key, nil).want(t, http.StatusNotFound, "list_not_found")
	if n := b.count(`SELECT (SELECT count(*) FROM lists WHERE id = $1) + (SELECT count(*) FROM list_rows WHERE list_id = $1)
		+ (SELECT count(*) FROM list_addresses WHERE list_id = $1) + (SELECT count(*) FROM deliveries WHERE list_id = $1)`, gone); n != 0 {
		t.Errorf("%d rows of the expired list left after its DELETE", n)
	}
	b.call(http.MethodDelete, "/v1/email/lists/"+gone, key, nil).want(t, http.StatusNotFound, "list_not_found")
	b.call(http.MethodGet, "/v1/email/lists/"+kept, key, nil).want(t, http.StatusOK, "")
}
