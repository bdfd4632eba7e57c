package client_test

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// resultHeader is what docs/lists.md, "Results", says the CSV appends to the input's columns.
const resultHeader = "status,reason,valid,confidence,failed_check,disposable,role,free_provider,catch_all,smtp_blocked,mx_found,mx_host,suggestion,smtp_code,smtp_enhanced_code,smtp_text"

// End-to-end: a CSV of the demo addresses through a bulk list on the real server, from upload to
// delete.
func TestE2EListLifecycle(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithTimeout(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 3 rounds of the 7 demo addresses, the second round upper-cased: duplicates after
	// normalisation, so 21 rows and 7 unique addresses.
	var in strings.Builder
	in.WriteString("first,Email Address,city\n")
	var emails []string
	for round := range 3 {
		for i, a := range mailsim.DemoAddresses {
			e := a.Email
			if round == 1 {
				e = strings.ToUpper(e)
			}
			emails = append(emails, e)
			fmt.Fprintf(&in, "P%d-%d,%s,\"+Town, %d\"\n", round, i, e, i) // + as a phone number starts
		}
	}
	// A pipe has no length: the body can only be streamed. The answer's state is not checked:
	// seven addresses can be verified before the 202 is written (it was, on the CI machine).
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, strings.NewReader(in.String()))
		pw.CloseWithError(err)
	}()
	l, err := c.UploadList(ctx, pr, client.ListUpload{Name: "e2e", WebhookURL: "https://hooks.example.com/lists", WebhookSecret: "at-least-8-chars"})
	if err != nil {
		t.Fatal(err)
	}
	if l.ID == "" || l.Name != "e2e" || l.Format != client.ListCSV || l.EmailColumn != "Email Address" || l.Rows != 21 || l.Unique != 7 ||
		strings.Join(l.Columns, "|") != "first|Email Address|city" || l.WebhookURL != "https://hooks.example.com/lists" {
		t.Fatalf("UploadList = %+v", l)
	}

	var readings atomic.Int32
	done, err := c.WaitList(ctx, l.ID, 50*time.Millisecond, func(p client.List) {
		readings.Add(1)
		if p.ID != l.ID || p.Progress < 0 || p.Progress > 1 {
			t.Errorf("progress reading %+v", p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if done.State != client.ListCompleted || done.Verified != 7 || done.Progress != 1 || done.FinishedAt == nil || done.ExpiresAt == nil ||
		done.RatePerSecond == nil || done.ETASeconds != nil || readings.Load() < 1 {
		t.Fatalf("WaitList = %+v (%d readings)", done, readings.Load())
	}
	byStatus := map[string]int{}
	for _, a := range mailsim.DemoAddresses {
		byStatus[demoWants[a.Email][0]]++
	}
	for st, n := range byStatus {
		if done.Counts.ByStatus[st] != n {
			t.Errorf("counts.by_status = %v, want %v", done.Counts.ByStatus, byStatus)
			break
		}
	}
	if done.Counts.ByReason["accepted"] != 1 || done.Counts.ByReason["mailbox_unknown"] != 1 {
		t.Errorf("counts.by_reason = %v", done.Counts.ByReason)
	}

	// The account's lists: this one.
	page, err := c.Lists(ctx, client.ListsPage{Limit: 10})
	if err != nil || len(page.Lists) != 1 || page.Lists[0].ID != l.ID || page.NextCursor != "" {
		t.Fatalf("Lists = %+v, %v", page, err)
	}

	// CSV: every row in input order, the input's columns unchanged (but for the apostrophe before
	// a cell a spreadsheet would run as a formula), then the result's.
	rc, err := c.ListResults(ctx, l.ID, client.ResultsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(skipBOM(t, rc)).ReadAll()
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(records[0], ","); got != "first,Email Address,city,"+resultHeader {
		t.Fatalf("header %s", got)
	}
	if len(records) != 1+len(emails) {
		t.Fatalf("%d rows, want %d", len(records)-1, len(emails))
	}
	for i, row := range records[1:] {
		round, k := i/len(mailsim.DemoAddresses), i%len(mailsim.DemoAddresses)
		want := demoWants[mailsim.DemoAddresses[k].Email]
		if row[0] != fmt.Sprintf("P%d-%d", round, k) || row[1] != emails[i] || row[2] != fmt.Sprintf("'+Town, %d", k) {
			t.Fatalf("row %d: %q: not the input's row %d", i, row, i)
		}
		if row[3] != want[0] || row[4] != want[1] {
			t.Errorf("row %d (%s): %s/%s, want %v", i, emails[i], row[3], row[4], want)
		}
	}

	// RawFormulas: the cells exactly as uploaded.
	rc, err = c.ListResults(ctx, l.ID, client.ResultsOptions{RawFormulas: true})
	if err != nil {
		t.Fatal(err)
	}
	records, err = csv.NewReader(rc).ReadAll()
	rc.Close()
	if err != nil || len(records) != 1+len(emails) || records[1][2] != "+Town, 0" {
		t.Fatalf("raw CSV: %v, first row %q", err, records[1])
	}

	// NDJSON, deliverable rows only: the three spellings of ann@acme.example, in input order.
	rc, err = c.ListResults(ctx, l.ID, client.ResultsOptions{Format: client.ListNDJSON, Statuses: []string{client.StatusDeliverable}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		var row struct {
			First  string        `json:"first"`
			Email  string        `json:"Email Address"`
			Result client.Result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		if row.Result.Status != client.StatusDeliverable {
			t.Errorf("filtered row %s", sc.Text())
		}
		got = append(got, row.First+" "+row.Email)
	}
	rc.Close()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "P0-0 ann@acme.example|P1-0 ANN@ACME.EXAMPLE|P2-0 ann@acme.example"; strings.Join(got, "|") != want {
		t.Errorf("NDJSON deliverable rows %q, want %q", got, want)
	}

	// A finished list cannot be canceled; deleting it removes it.
	var e *client.Error
	if _, err := c.CancelList(ctx, l.ID); !errors.As(err, &e) || e.Status != 409 || e.Code != client.CodeListFinished {
		t.Errorf("canceling a finished list: %v", err)
	}
	if err := c.DeleteList(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(ctx, l.ID); !errors.As(err, &e) || e.Status != 404 || e.Code != client.CodeListNotFound {
		t.Errorf("a deleted list: %v", err)
	}
	if _, err := c.ListResults(ctx, l.ID, client.ResultsOptions{}); !errors.As(err, &e) || e.Code != client.CodeListNotFound {
		t.Errorf("results of a deleted list: %v", err)
	}
	if err := c.DeleteList(ctx, l.ID); !errors.As(err, &e) || e.Code != client.CodeListNotFound {
		t.Errorf("deleting twice: %v", err)
	}
}

// A plain-text list canceled at once ends canceled (or had already completed, on a fast
// machine); either way WaitList ends on a final state and the results are still readable.
func TestE2EListCancel(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var in strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&in, "user%04d@globex.example\n", i) // catch-all: an SMTP round trip each
	}
	l, err := c.UploadList(ctx, strings.NewReader(in.String()), client.ListUpload{Format: client.ListText})
	if err != nil {
		t.Fatal(err)
	}
	if l.Format != client.ListText || l.Rows != 3000 || l.Unique != 3000 || strings.Join(l.Columns, ",") != "email" {
		t.Fatalf("UploadList = %+v", l)
	}
	canceled, err := c.CancelList(ctx, l.ID)
	var e *client.Error
	switch {
	case err == nil:
		if canceled.State != client.ListCanceled || !canceled.Done() {
			t.Fatalf("CancelList = %+v", canceled)
		}
	case errors.As(err, &e) && e.Code == client.CodeListFinished:
		t.Log("the list completed before the cancel")
	default:
		t.Fatal(err)
	}
	final, err := c.WaitList(ctx, l.ID, 0, nil)
	if err != nil || !final.Done() {
		t.Fatalf("WaitList = %+v, %v", final, err)
	}
	rc, err := c.ListResults(ctx, l.ID, client.ResultsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(skipBOM(t, rc)).ReadAll()
	rc.Close()
	if err != nil || len(records) != 3001 || strings.Join(records[0], ",") != "email,"+resultHeader || records[1][0] != "user0000@globex.example" {
		t.Fatalf("%d records, %v", len(records), err)
	}
	t.Logf("final state %s, %d of %d verified", final.State, final.Verified, final.Unique)
}

// A file the API cannot read is refused whole with the line at fault, typed on *client.Error.
func TestE2EListBadFile(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL))
	ctx := context.Background()
	var e *client.Error
	_, err := c.UploadList(ctx, strings.NewReader("name,email\nAnn,ann@acme.example\nZoe,zoe@acme.example,extra\n"), client.ListUpload{})
	if !errors.As(err, &e) || e.Status != 400 || e.Code != client.CodeInvalidRequest || e.Line != 3 || !strings.Contains(e.Message, "line 3") {
		t.Fatalf("ragged CSV: %#v", err)
	}
	_, err = c.UploadList(ctx, strings.NewReader("{\"mail\":\"ann@acme.example\"}\n"), client.ListUpload{Format: client.ListNDJSON})
	if !errors.As(err, &e) || e.Code != client.CodeInvalidRequest || e.Line != 1 {
		t.Errorf("NDJSON without email: %v", err)
	}
	_, err = c.UploadList(ctx, strings.NewReader("name,email\nAnn,ann@acme.example\n"), client.ListUpload{Column: "mail"})
	if !errors.As(err, &e) || e.Code != client.CodeInvalidRequest || e.Line != 1 {
		t.Errorf("unknown column: %v", err)
	}
	if _, err := c.UploadList(ctx, strings.NewReader("x"), client.ListUpload{Format: "xlsx"}); err == nil || errors.As(err, &e) {
		t.Errorf("unknown format: %v", err)
	}
	page, err := c.Lists(ctx, client.ListsPage{})
	if err != nil || len(page.Lists) != 0 {
		t.Errorf("refused uploads stored lists: %+v, %v", page, err)
	}
}

// closeRecorder is a file-like body: UploadList must stream it and must not close it.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// An upload is sent once, as it is: no retry of a 429 even with retrying on, the file's bytes
// with its Content-Type, the secret in a header rather than the query string.
func TestUploadIsNotRetried(t *testing.T) {
	t.Parallel()
	var seen []*http.Request
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, `{"error":"monthly_quota_exceeded","message":"m","action":"a","docs":"d","limit":100,"used":98,"reset_at":"2026-12-01T00:00:00Z"}`)
	})
	c := client.New("sk_live_x", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	body := &closeRecorder{Reader: strings.NewReader("ann@acme.example\n")}
	_, err := c.UploadList(context.Background(), body, client.ListUpload{Format: client.ListText, Name: "june",
		WebhookURL: "https://hooks.example.com/l", WebhookSecret: "s3cret-value"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeMonthlyQuotaExceeded || e.Used != 98 {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests: an upload cannot be replayed", n)
	}
	r := seen[0]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/email/lists" || r.Header.Get("Content-Type") != "text/plain" ||
		r.Header.Get("Mailvet-Webhook-Secret") != "s3cret-value" || r.URL.Query().Get("webhook_secret") != "" ||
		r.URL.Query().Get("name") != "june" || r.URL.Query().Get("webhook_url") != "https://hooks.example.com/l" {
		t.Errorf("request %s %s %v", r.Method, r.URL, r.Header)
	}
	if len(r.TransferEncoding) == 0 || r.TransferEncoding[0] != "chunked" {
		t.Errorf("transfer encoding %v: a reader of unknown length is streamed", r.TransferEncoding)
	}
	if f.bodies[0] != "ann@acme.example\n" {
		t.Errorf("body %q", f.bodies[0])
	}
	if body.closed {
		t.Error("UploadList closed the caller's reader")
	}
}

// A download cut off by the server is an error from Read, never a clean end of file.
func TestListResultsTruncated(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv")
		w.Header().Set("X-Request-Id", "req-cut")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "email,status\nann@acme.example,deliverable\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // as the API does when its database fails mid-download
	})
	c := client.New("sk_live_x", client.WithBaseURL(srv.URL))
	rc, err := c.ListResults(context.Background(), "l1", client.ResultsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err == nil || !strings.HasPrefix(string(b), "email,status\n") {
		t.Errorf("read %q, %v: want the rows so far and an error", b, err)
	}
	if err != nil && (!errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "(request id req-cut)")) {
		t.Errorf("error %v: want io.ErrUnexpectedEOF, with the request id", err)
	}
}

// skipBOM reads past the byte-order mark that begins an escaped CSV download (docs/lists.md,
// "Results"), failing the test when it is not there.
func skipBOM(t *testing.T, r io.Reader) io.Reader {
	t.Helper()
	br := bufio.NewReader(r)
	if bom, err := br.Peek(3); err != nil || string(bom) != "\ufeff" {
		t.Fatalf("the download begins %q (%v), not with a byte-order mark", bom, err)
	}
	_, _ = br.Discard(3)
	return br
}
