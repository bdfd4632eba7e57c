package api

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// upload posts a file to the upload route with its content type and query.
func (b *verifyBundle) upload(key, contentType, query, file string) reply {
	b.t.Helper()
	return b.call(http.MethodPost, "/v1/email/lists"+query, key, file, "Content-Type", contentType)
}

// waitList polls a list until it is in state (or fails the test after 30 s) and returns it.
func (b *verifyBundle) waitList(key, id, state string) map[string]any {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(b.t, http.StatusOK, "").body
		if l["state"] == state {
			return l
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("list %s did not reach %s: %v", id, state, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// download fetches a list's results, checks the response against /openapi.json, and returns the
// body.
func (b *verifyBundle) download(key, id, query string) (*http.Response, string) {
	b.t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/email/lists/"+id+"/results"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, raw := serve(b.srv.Handler(), req)
	if resp.StatusCode == http.StatusOK {
		assertMatchesSpec(b.t, req, resp.StatusCode, resp.Header, nil)
	} else {
		assertMatchesSpec(b.t, req, resp.StatusCode, resp.Header, raw)
	}
	return resp, string(raw)
}

func TestListUploadVerifyDownloadDelete(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	secret := "list-secret-123"
	// Two rows of one address (case and blanks differ), a syntax failure, an unknown mailbox, a
	// domain without mail, and a row whose other columns must come back as they were.
	file := "first,Email Address,city\r\n" +
		"Ann,ann@acme.test,\"Paris, FR\"\r\n" +
		"Bob,bob@acme.test,Berlin\r\n" +
		"Ann again, ANN@acme.test ,Rome\r\n" +
		"Nobody,nobody@acme.test,\r\n" +
		"Broken,not-an-address,Oslo\r\n" +
		"Null,x@nomx.test,Lima\r\n"
	r := b.call(http.MethodPost, "/v1/email/lists?name=june&webhook_url=https://hooks.example.com/lists", key, file,
		"Content-Type", "text/csv", "Mailvet-Webhook-Secret", secret).want(t, http.StatusAccepted, "")
	id, _ := r.body["id"].(string)
	if r.body["rows"] != 6.0 || r.body["unique"] != 5.0 || r.body["email_column"] != "Email Address" || r.body["name"] != "june" {
		t.Fatalf("upload answer %v", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/v1/email/lists/"+id {
		t.Errorf("Location %q", loc)
	}

	l := b.waitList(key, id, "completed")
	if l["verified"] != 5.0 || l["progress"] != 1.0 || l["finished_at"] == nil || l["expires_at"] == nil {
		t.Fatalf("completed list %v", l)
	}
	byStatus, _ := l["counts"].(map[string]any)["by_status"].(map[string]any)
	want := map[string]any{"deliverable": 2.0, "undeliverable": 1.0, "invalid": 2.0}
	if fmt.Sprint(byStatus) != fmt.Sprint(want) {
		t.Errorf("counts by status %v, want %v", byStatus, want)
	}

	// CSV: every row in input order, its own columns, then the result's.
	resp, body := b.download(key, id, "")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") || resp.Header.Get("Mailvet-List-State") != "completed" {
		t.Errorf("headers %v", resp.Header)
	}
	recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(body, list.ByteOrderMark))).ReadAll()
	if err != nil {
		t.Fatalf("results are not CSV: %v\n%s", err, body)
	}
	if got := strings.Join(recs[0][:5], ","); got != "first,Email Address,city,status,reason" || len(recs) != 7 {
		t.Fatalf("results header %v, %d records", recs[0], len(recs))
	}
	wantRows := [][]string{
		{"Ann", "ann@acme.test", "Paris, FR", "deliverable"},
		{"Bob", "bob@acme.test", "Berlin", "deliverable"},
		{"Ann again", " ANN@acme.test ", "Rome", "deliverable"},
		{"Nobody", "nobody@acme.test", "", "undeliverable"},
		{"Broken", "not-an-address", "Oslo", "invalid"},
		{"Null", "x@nomx.test", "Lima", "invalid"},
	}
	for i, w := range wantRows {
		if got := recs[i+1][:4]; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("row %d: %v, want %v", i+1, got, w)
		}
	}
	// The last three columns are the smtp_reply: the refusal of the unknown mailbox, nothing for
	// the address no server was asked about.
	if n := len(recs[0]); strings.Join(recs[0][n-3:], ",") != "smtp_code,smtp_enhanced_code,smtp_text" ||
		strings.Join(recs[4][n-3:n-1], " ") != "550 5.1.1" || recs[4][n-1] == "" || strings.Join(recs[5][n-3:], "") != "" {
		t.Errorf("smtp_reply columns: header %v, unknown mailbox %v, syntax failure %v", recs[0], recs[4], recs[5])
	}
	// NDJSON, filtered by status: the input's fields by name, then the result.
	_, body = b.download(key, id, "?format=ndjson&status=undeliverable,invalid")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) != 3 {
		t.Fatalf("filtered NDJSON: %q", body)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	// The result reads as every other response's: the API's field order, no jsonb spacing.
	if !strings.Contains(lines[0], `"result":{"email":"nobody@acme.test","valid":false,"status":"undeliverable",`) {
		t.Errorf("NDJSON result not in the API's form: %s", lines[0])
	}
	res, _ := first["result"].(map[string]any)
	reply, _ := res["smtp_reply"].(map[string]any)
	if first["first"] != "Nobody" || res["status"] != "undeliverable" || res["reason"] != "mailbox_unknown" ||
		reply["code"] != 550.0 || reply["enhanced_code"] != "5.1.1" {
		t.Errorf("first NDJSON line %v", first)
	}

	// Billed once per unique address that passed the syntax check; nothing for the duplicate.
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" }); n != 5 {
		t.Errorf("usage rows %d, want 5", n)
	}
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" && r.Billable }); n != 4 {
		t.Errorf("billable rows %d, want 4", n)
	}
	if n := b.usage(acct).Billable; n != 4 {
		t.Errorf("monthly billable %d, want 4", n)
	}

	// The completion callback: a delivery of the list, with the caller's secret sealed on it;
	// the list's copy is gone.
	var cb []byte
	var sealedSecret string
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT body, webhook_secret FROM deliveries WHERE list_id = $1`, id).Scan(&cb, &sealedSecret), "list delivery")
	if got := b.openSecret(sealedSecret); got != secret {
		t.Errorf("callback secret opens to %q", got)
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE id = $1 AND webhook_secret IS NULL`, id); n != 1 {
		t.Error("a finished list keeps its webhook secret")
	}
	var callback map[string]any
	_ = json.Unmarshal(cb, &callback)
	if callback["event"] != "list.completed" || callback["list"].(map[string]any)["id"] != id {
		t.Errorf("callback %s", cb)
	}
	deliveries := b.call(http.MethodGet, "/v1/management/deliveries", b.provisioningKey(acct), nil).want(t, http.StatusOK, "").body
	if ds, _ := deliveries["deliveries"].([]any); len(ds) != 1 || ds[0].(map[string]any)["list_id"] != id {
		t.Errorf("delivery log %v", deliveries)
	}

	// The account's lists, and nobody else's.
	page := b.call(http.MethodGet, "/v1/email/lists?limit=1", key, nil).want(t, http.StatusOK, "").body
	if ls, _ := page["lists"].([]any); len(ls) != 1 || page["next_cursor"] != nil {
		t.Errorf("page %v", page)
	} else {
		// A page's lists have their counts, as the list itself does.
		one := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusOK, "").body
		got := ls[0].(map[string]any)["counts"]
		if by, _ := got.(map[string]any)["by_status"].(map[string]any); len(by) == 0 || fmt.Sprint(got) != fmt.Sprint(one["counts"]) {
			t.Errorf("a page's counts %v, the list's %v", got, one["counts"])
		}
	}
	_, other := b.customer(plan.Builder)
	b.call(http.MethodGet, "/v1/email/lists/"+id, other, nil).want(t, http.StatusNotFound, "list_not_found")
	if resp, _ := b.download(other, id, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another account's download: %d", resp.StatusCode)
	}
	b.call(http.MethodDelete, "/v1/email/lists/"+id, other, nil).want(t, http.StatusNotFound, "list_not_found")
	b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", key, nil).want(t, http.StatusConflict, "list_finished")

	// Delete: the rows and results are gone; the bill stays, without addresses.
	b.call(http.MethodDelete, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNoContent, "")
	b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusNotFound, "list_not_found")
	for _, table := range []string{"list_rows", "list_addresses", "list_counts"} {
		if n := b.count(`SELECT count(*) FROM `+table+` WHERE list_id = $1`, id); n != 0 {
			t.Errorf("%s keeps %d rows of a deleted list", table, n)
		}
	}
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" && !r.HasSnapshot }); n != 5 {
		t.Errorf("usage rows after delete %d, want 5 without snapshots", n)
	}
}

func TestListFormats(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, key := b.customer(plan.Builder)
	for _, c := range []struct{ ct, file, line0, csvHead string }{
		{"application/x-ndjson", "{\"email\":\"ann@acme.test\",\"crm_id\":7}\n\n{\"email\":\"bob@acme.test\"}\n",
			`{"email":"ann@acme.test","crm_id":7,"result":`, "email,status,reason"},
		{"text/plain; charset=utf-8", "\ufeffann@acme.test\r\n\r\nbob@acme.test", `{"email":"ann@acme.test","result":`, "email,status,reason"},
		// A file exported from another verifier: its result column keeps its value under a key
		// of its own, so the line has one result key (docs/lists.md, "Results").
		{"text/csv", "email,result\nann@acme.test,valid\nbob@acme.test,invalid\n",
			`{"email":"ann@acme.test","result_2":"valid","result":{`, "email,result,status,reason"},
	} {
		r := b.upload(key, c.ct, "", c.file).want(t, http.StatusAccepted, "")
		id := r.body["id"].(string)
		if r.body["rows"] != 2.0 {
			t.Errorf("%s: rows %v", c.ct, r.body["rows"])
		}
		b.waitList(key, id, "completed")
		_, body := b.download(key, id, "?format=ndjson")
		if !strings.HasPrefix(body, c.line0) || strings.Count(body, "\n") != 2 {
			t.Errorf("%s: results %q", c.ct, body)
		}
		_, body = b.download(key, id, "?format=csv")
		if !strings.HasPrefix(body, list.ByteOrderMark+c.csvHead) || !strings.Contains(body, "\nann@acme.test,") || !strings.Contains(body, ",deliverable,accepted") {
			t.Errorf("%s: CSV results %q", c.ct, body)
		}
	}
}

// Bad files are refused with the line, and leave nothing stored or charged.
func TestListBadInput(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_LIST_MAX_ROWS": "5", "MAILVET_LIST_MAX_BYTES": "4096"}})
	acct, key := b.customer(plan.Free)
	long := "email\n" + strings.Repeat("a", 101<<10) + "@acme.test\n"
	for _, c := range []struct {
		name, ct, query, file string
		status                int
		code                  string
		line                  float64
		says                  string
	}{
		{"ragged row", "text/csv", "", "email,name\nann@acme.test,Ann\nbob@acme.test\n", 400, "invalid_request", 3, "header's 2 columns"},
		{"no such column", "text/csv", "?column=mail", "email\nann@acme.test\n", 400, "invalid_request", 1, `no column "mail"`},
		{"no email column", "text/csv", "", "name,city\nAnn,Paris\n", 400, "invalid_request", 0, "holds no email addresses"},
		{"no header", "text/csv", "", "ann@acme.test\nbob@acme.test\n", 400, "invalid_request", 1, "add a header row"},
		{"bad encoding", "text/csv", "", "email\nann@acme.test\n\xff\xfe@acme.test\n", 400, "invalid_request", 3, "UTF-8"},
		{"NUL", "text/plain", "", "ann@acme.test\nb\x00b@acme.test\n", 400, "invalid_request", 2, "NUL"},
		{"UTF-16", "text/plain", "", "\xff\xfea\x00", 400, "invalid_request", 1, "UTF-16"},
		{"UTF-16 without BOM", "text/csv", "", "e\x00m\x00a\x00i\x00l\x00\n\x00", 400, "invalid_request", 1, "UTF-16 (without a byte-order mark)"},
		{"UTF-16BE without BOM", "text/plain", "", "\x00a\x00n\x00n\x00@\x00x", 400, "invalid_request", 1, "UTF-16"},
		{"too many columns", "text/csv", "", "email" + strings.Repeat(",", 1000) + "\nann@acme.test" + strings.Repeat(",", 1000) + "\n", 400, "invalid_request", 1, "the header has 1001 columns; a list may have at most 1000"},
		{"not JSON", "application/x-ndjson", "", "{\"email\":\"ann@acme.test\"}\nann@acme.test\n", 400, "invalid_request", 2, "JSON object"},
		{"no email field", "application/x-ndjson", "", "{\"mail\":\"ann@acme.test\"}\n", 400, "invalid_request", 1, `"email"`},
		{"empty", "text/csv", "", "", 400, "invalid_request", 0, "empty"},
		{"header only", "text/csv", "", "email\n", 400, "invalid_request", 0, "no rows"},
		{"too many rows", "text/plain", "", strings.Repeat("ann@acme.test\n", 6), 413, "payload_too_large", 0, "more than 5 rows"},
		{"too many bytes", "text/plain", "", strings.Repeat("ann@acme.test\n", 400), 413, "payload_too_large", 0, "4096 bytes"},
		{"long line", "text/csv", "", long, 413, "payload_too_large", 0, "4096 bytes"},
		{"content type", "application/json", "", `{"emails":["ann@acme.test"]}`, 400, "invalid_request", 0, "Content-Type"},
		{"query", "text/csv", "?colum=email", "email\nann@acme.test\n", 400, "invalid_request", 0, `"colum"`},
		{"secret without hook", "text/csv", "?webhook_secret=12345678", "email\nann@acme.test\n", 400, "invalid_request", 0, "webhook_url"},
		{"private hook", "text/csv", "?webhook_url=http://127.0.0.1/x", "email\nann@acme.test\n", 400, "invalid_request", 0, "webhook_url"},
		{"NUL in secret", "text/csv", "?webhook_url=https://hooks.example.com/x&webhook_secret=abcdefgh%00ij", "email\nann@acme.test\n", 400, "invalid_request", 0, "webhook_secret contains a NUL"},
		{"bad bytes in secret", "text/csv", "?webhook_url=https://hooks.example.com/x&webhook_secret=abcdefgh%FFij", "email\nann@acme.test\n", 400, "invalid_request", 0, "webhook_secret is not valid UTF-8"},
		{"bad bytes in hook", "text/csv", "?webhook_url=https://hooks.example.com/%FF", "email\nann@acme.test\n", 400, "invalid_request", 0, "webhook_url"},
		// A name reaches terminals and the dashboard: no line break, escape or right-to-left override.
		{"line break in name", "text/csv", "?name=june%0Amay", "email\nann@acme.test\n", 400, "invalid_request", 0, "Field name contains a control character"},
		{"escape in name", "text/csv", "?name=%1B%5B31mRED", "email\nann@acme.test\n", 400, "invalid_request", 0, "Field name contains a control character"},
		{"NUL in name", "text/csv", "?name=a%00b", "email\nann@acme.test\n", 400, "invalid_request", 0, "Field name contains a control character"},
		{"bidi in name", "text/csv", "?name=%E2%80%AEgpj.exe", "email\nann@acme.test\n", 400, "invalid_request", 0, "Field name contains a bidirectional control character"},
		{"long name", "text/csv", "?name=" + strings.Repeat("n", 201), "email\nann@acme.test\n", 400, "invalid_request", 0, "Field name is longer than 200 characters"},
		{"two callback URLs", "text/csv", "?webhook_url=https://hooks.example.com/x&callback_url=https://127.0.0.1/", "email\nann@acme.test\n", 400, "invalid_request", 0, "callback_url is an alias"},
	} {
		r := b.upload(key, c.ct, c.query, c.file).want(t, c.status, c.code)
		msg, _ := r.body["message"].(string)
		if !strings.Contains(msg, c.says) {
			t.Errorf("%s: message %q does not say %q", c.name, msg, c.says)
		}
		if line, _ := r.body["line"].(float64); line != c.line {
			t.Errorf("%s: line %v, want %v (%s)", c.name, r.body["line"], c.line, msg)
		}
		if c.status == 413 || c.line > 0 {
			if r.header.Get("Connection") != "close" {
				t.Errorf("%s: a refused upload keeps the connection open", c.name)
			}
		}
	}
	// A compressed body is refused, whatever the encoding, instead of being read as the file.
	for _, enc := range []string{"gzip", "br"} {
		r := b.call(http.MethodPost, "/v1/email/lists", key, "email\nann@acme.test\n", "Content-Type", "text/csv", "Content-Encoding", enc).
			want(t, http.StatusBadRequest, "invalid_request")
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, "Content-Encoding") {
			t.Errorf("Content-Encoding %s: %q", enc, msg)
		}
	}
	// A line over 100 KB within the byte limit is named too.
	b2 := setupVerify(t, verifyOpts{noWorkers: true})
	_, key2 := b2.customer(plan.Builder)
	r := b2.upload(key2, "text/csv", "", long).want(t, http.StatusBadRequest, "invalid_request")
	if r.body["line"] != 2.0 || !strings.Contains(r.body["message"].(string), "longer than 102400 bytes") {
		t.Errorf("long line: %v", r.body)
	}
	// Invalid addresses inside a good file are results, not errors.
	b.upload(key, "text/plain", "", "not-an-address\nann@acme.test\n").want(t, http.StatusAccepted, "")

	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 1 {
		t.Errorf("%d lists stored, want only the good one", n)
	}
	if n := b.count(`SELECT count(*) FROM list_rows r WHERE NOT EXISTS (SELECT 1 FROM lists l WHERE l.id = r.list_id)`); n != 0 {
		t.Errorf("%d rows of refused uploads stored", n)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Quota+c.Held != 2 {
		t.Errorf("counts %+v, want the good list's 2 units held", c)
	}
	// Refused uploads get no usage-log rows: those are for the verify routes (docs/errors.md).
	b.srv.Close() // writes the usage rows still queued behind responses
	if n := b.rows(acct, usagetest.Refused("")); n != 0 {
		t.Errorf("%d usage-log rows of refused uploads", n)
	}
}

// Admission at upload: the unique count against the free quota and the paid spend cap, before
// anything is stored; the per-minute rate limit does not apply to lists. A running list's
// remaining addresses count against the cap for everything admitted after it.
func TestListAdmission(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, env: map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS": "10", "MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "2",
		"MAILVET_PLAN_BUILDER_MONTHLY_CALLS": "5", "MAILVET_OVERAGE_EUR_BUILDER": "1"}})
	free, key := b.customer(plan.Free)
	addrs := func(n int) string {
		var s strings.Builder
		for i := range n {
			fmt.Fprintf(&s, "user%d@acme.test\nUSER%d@acme.test\n", i, i) // each twice: unique is n
		}
		return s.String()
	}
	// 8 unique of 10: admitted although the rate limit is 2 a minute, and the rate window is untouched.
	b.upload(key, "text/plain", "", addrs(8)).want(t, http.StatusAccepted, "")
	b.verify(key, map[string]string{"email": "not-an-address"}).want(t, http.StatusOK, "") // decided locally
	// 3 more unique would pass the quota (8 + 1 + 3 > 10): refused whole.
	r := b.upload(key, "text/plain", "", addrs(3)).want(t, http.StatusTooManyRequests, "monthly_quota_exceeded")
	if r.body["limit"] != 10.0 || r.body["used"] != 9.0 || r.header.Get("Retry-After") == "" {
		t.Errorf("quota refusal %v %v", r.body, r.header)
	}
	// More unique addresses than the whole quota: it can never pass on this plan, so no Retry-After.
	if r := b.upload(key, "text/plain", "", addrs(11)).want(t, http.StatusTooManyRequests, "monthly_quota_exceeded"); r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a list larger than the whole quota", r.header.Get("Retry-After"))
	}
	b.upload(key, "text/plain", "", addrs(1)).want(t, http.StatusAccepted, "")
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, free); n != 2 {
		t.Errorf("lists %d", n)
	}

	// Paid: 5 included, 1 EUR each beyond; a cap of 2 EUR allows 7 unique at most.
	paid, pkey := b.customer(plan.Builder)
	_, err := b.pool.Exec(context.Background(), `UPDATE accounts SET hard_cap_eur = 2 WHERE id = $1`, paid)
	pgtest.Must(t, err, "cap")
	r = b.upload(pkey, "text/plain", "", addrs(8)).want(t, http.StatusPaymentRequired, "payment_required")
	if r.body["hard_cap_eur"] != 2.0 {
		t.Errorf("cap refusal %v", r.body)
	}
	id := b.upload(pkey, "text/plain", "", addrs(7)).want(t, http.StatusAccepted, "").body["id"].(string)

	// While the list runs, the addresses it has still to verify hold their room under the cap:
	// another request, or another list, cannot spend it too. Canceled, the list gives it back.
	b.verify(pkey, map[string]string{"email": "not-an-address"}).want(t, http.StatusPaymentRequired, "payment_required")
	b.upload(pkey, "text/plain", "", addrs(1)).want(t, http.StatusPaymentRequired, "payment_required")
	b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", pkey, nil).want(t, http.StatusOK, "")
	b.verify(pkey, map[string]string{"email": "not-an-address"}).want(t, http.StatusOK, "")
}

// Cancel stops a list and releases its hold, so the quota units of what it did not verify are
// back; chunks still queued are dropped by the workers, unbilled. Delete of a running list does
// the same.
func TestListCancelRefunds(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Free)
	id := b.upload(key, "text/plain", "", "ann@acme.test\nbob@acme.test\nzed@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	quota := func() int {
		c := usagetest.Of(t, b.pool, acct)
		return c.Quota + c.Held
	}
	if q := quota(); q != 3 {
		t.Fatalf("quota units after upload %d, want 3", q)
	}
	l := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil).want(t, http.StatusOK, "").body
	if l["state"] != "running" {
		t.Fatalf("list %v", l)
	}
	l = b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", key, nil).want(t, http.StatusOK, "").body
	if l["state"] != "canceled" || l["finished_at"] == nil {
		t.Fatalf("canceled list %v", l)
	}
	if q := quota(); q != 0 {
		t.Errorf("quota units after cancel %d, want 0", q)
	}
	b.call(http.MethodPost, "/v1/email/lists/"+id+"/cancel", key, nil).want(t, http.StatusConflict, "list_finished")

	// A worker now takes the queued chunk and drops it: nothing is verified or billed.
	b.startWorker(t)
	time.Sleep(500 * time.Millisecond)
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Route == "verify_list" }); n != 0 {
		t.Errorf("a canceled list billed %d rows", n)
	}
	if n := b.count(`SELECT count(*) FROM list_addresses WHERE list_id = $1 AND result IS NOT NULL`, id); n != 0 {
		t.Errorf("a canceled list got %d results", n)
	}
}

// A CSV download escapes every cell a spreadsheet would run as a formula, column names included,
// unless escape_formulas=false asks for the cells as stored (docs/lists.md, "Formula cells"); a
// value of the parameter that is neither true nor false is refused.
func TestListResultsEscapeFormulas(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Builder)
	file := "email,=cmd|' /C calc'!A0,note\n" +
		"ann@acme.test,\"=HYPERLINK(\"\"http://evil.example\"\")\",+33 1 23\n" +
		"-2+3@acme.test,@SUM(A1),\"\tx\"\n" +
		"bob@acme.test,plain,a=b\n"
	r := b.upload(key, "text/csv", "?column=email", file).want(t, http.StatusAccepted, "")
	id := r.body["id"].(string)
	read := func(query string) [][]string {
		t.Helper()
		resp, body := b.download(key, id, query)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("download %s: %d %s", query, resp.StatusCode, body)
		}
		// The escaped download begins with a byte-order mark (docs/lists.md, "Results").
		if escaped := !strings.Contains(query, "escape_formulas=false"); strings.HasPrefix(body, list.ByteOrderMark) != escaped {
			t.Errorf("download %s: byte-order mark %v, want %v", query, !escaped, escaped)
		}
		recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(body, list.ByteOrderMark))).ReadAll()
		if err != nil {
			t.Fatalf("download %s is not CSV: %v", query, err)
		}
		for i := range recs {
			recs[i] = recs[i][:3] // the input's columns; the result's are empty (no workers)
		}
		return recs
	}
	escaped := [][]string{
		{"email", "'=cmd|' /C calc'!A0", "note"},
		{"ann@acme.test", "'=HYPERLINK(\"http://evil.example\")", "'+33 1 23"},
		{"'-2+3@acme.test", "'@SUM(A1)", "'\tx"},
		{"bob@acme.test", "plain", "a=b"},
	}
	raw := [][]string{
		{"email", "=cmd|' /C calc'!A0", "note"},
		{"ann@acme.test", "=HYPERLINK(\"http://evil.example\")", "+33 1 23"},
		{"-2+3@acme.test", "@SUM(A1)", "\tx"},
		{"bob@acme.test", "plain", "a=b"},
	}
	for _, c := range []struct {
		query string
		want  [][]string
	}{
		{"", escaped},
		{"?escape_formulas=true", escaped},
		{"?format=csv&escape_formulas=false", raw},
		{"?escape_formulas=false&status=deliverable", raw[:1]}, // the header only: nothing is verified
	} {
		if got := read(c.query); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
			t.Errorf("download %q:\n got %q\nwant %q", c.query, got, c.want)
		}
	}
	// NDJSON values are JSON strings, never escaped.
	if _, body := b.download(key, id, "?format=ndjson"); !strings.Contains(body, `"=cmd|' /C calc'!A0":"=HYPERLINK(`) {
		t.Errorf("NDJSON changed: %s", body)
	}
	for _, v := range []string{"yes", "0", "FALSE"} {
		resp, body := b.download(key, id, "?escape_formulas="+v)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid_request"`) ||
			!strings.Contains(body, "escape_formulas must be true or false") {
			t.Errorf("escape_formulas=%s: %d %s", v, resp.StatusCode, body)
		}
	}
}
