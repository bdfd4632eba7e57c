package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

func TestMain(m *testing.M) { demoapi.Main(m) }

// run runs one command line in-process, as the binary would.
func run(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// Mistakes on the command line exit 2 before any request; help and version need nothing.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	key := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": "http://127.0.0.1:1"}
	for _, args := range [][]string{
		{}, {"frobnicate"}, {"verify"}, {"verify", "--bogus", "a@b.example"}, {"verify", "--file", "x.csv", "a@b.example"},
		{"verify", "--out", "o.csv", "a@b.example"}, {"keys"}, {"keys", "rotate"}, {"keys", "revoke"}, {"usage", "extra"},
		{"lists", "show"}, {"lists", "frob", "x"}, {"lists", "list", "extra"}, {"lists", "results", "a", "b"},
		{"lists", "results", "x", "--format", "xml"}, {"lists", "show", "x", "--status", "deliverable"}, {"lists", "cancel", "x", "--limit", "3"},
		{"keys", "--json"}, {"version", "extra"}, {"keys", "list", "--sandbox"},
		// --json would promise JSON where the output is the results file (CSV unless --format).
		{"verify", "--file", "x.csv", "--json"}, {"lists", "results", "x", "--json"},
	} {
		if code, _, stderr := run(t, key, "", args...); code != ExitUsage || !strings.Contains(stderr, "mailvet help") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
	// An address the API would refuse stops the command before any batch is sent and charged.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"verify", "a@b.example", "", "c@d.example"}, "address 2 of 3 is empty"},
		{[]string{"verify", "a@b.example", " \t"}, "address 2 of 2 is empty"},
		{[]string{"verify", "\xff@b.example"}, "address 1 of 1 is not valid UTF-8"},
		{[]string{"verify", "a@b.example", strings.Repeat("a", 1015) + "@b.example"}, "address 2 of 2 is longer than 1024 bytes"},
	} {
		if code, _, stderr := run(t, key, "", c.args...); code != ExitUsage || !strings.Contains(stderr, c.says) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", c.args, code, stderr, c.says)
		}
	}
	if code, _, stderr := run(t, nil, "", "verify", "a@b.example"); code != ExitUsage || !strings.Contains(stderr, "MAILVET_API_KEY") {
		t.Errorf("no key: exit %d, %q", code, stderr)
	}
	// A key a header cannot carry (two lines of a key file, a pasted non-breaking space) is a usage
	// error naming MAILVET_API_KEY, never shown, rather than "could not reach the API … check
	// MAILVET_URL"; the blanks and byte-order mark around a key read from a file are dropped.
	for _, bad := range []string{"sk_live_SECRET\nsk_live_other", "sk_live_SECRET\u00a0x", "sk_live_SECRET\x00"} {
		env := map[string]string{"MAILVET_API_KEY": bad, "MAILVET_URL": "http://127.0.0.1:1"}
		code, _, stderr := run(t, env, "", "verify", "a@b.example")
		if code != ExitUsage || !strings.Contains(stderr, "MAILVET_API_KEY") || strings.Contains(stderr, "SECRET") {
			t.Errorf("MAILVET_API_KEY=%q: exit %d, %q", bad, code, stderr)
		}
	}
	var sent string
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"keys":[],"count":0,"max":2}`)
	}))
	t.Cleanup(echo.Close)
	env := map[string]string{"MAILVET_API_KEY": "\ufeffsk_mgmt_x\r\n", "MAILVET_URL": echo.URL}
	if code, _, stderr := run(t, env, "", "keys", "list", "--json"); code != ExitOK || sent != "Bearer sk_mgmt_x" {
		t.Errorf("a key read from a file: exit %d, sent %q, %s", code, sent, stderr)
	}
	// A MAILVET_URL that is not an http(s) URL is a usage error, told without its password.
	for _, bad := range []string{"localhost:8080", "api.example.com", "ftp://api.example.com", "https://u:s3cret@"} {
		env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": bad}
		code, _, stderr := run(t, env, "", "verify", "a@b.example")
		if code != ExitUsage || !strings.Contains(stderr, "MAILVET_URL") || strings.Contains(stderr, "s3cret") ||
			(!strings.Contains(bad, "@") && !strings.Contains(stderr, bad)) {
			t.Errorf("MAILVET_URL=%s: exit %d, %q", bad, code, stderr)
		}
	}
	if code, stdout, _ := run(t, nil, "", "help"); code != ExitOK || !strings.Contains(stdout, "Exit codes:") {
		t.Errorf("help: exit %d, %q", code, stdout)
	}
	if code, stdout, _ := run(t, nil, "", "version"); code != ExitOK || stdout != "mailvet "+client.Version+"\n" {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	// Nothing listens on port 1: a network error is exit 1.
	if code, _, stderr := run(t, key, "", "verify", "a@b.example"); code != ExitError || !strings.Contains(stderr, "127.0.0.1:1") ||
		strings.Count(stderr, "mailvet:") != 1 {
		t.Errorf("unreachable: exit %d, %q (one mailvet: prefix)", code, stderr)
	}
}

// Every command's -h or --help, wherever it stands before a "--", prints that command's usage
// and flags on standard output and exits 0, with no key and no request.
func TestCommandHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string // in the output
	}{
		{[]string{"verify", "-h"}, []string{"mailvet verify [--json] ADDRESS...", "mailvet verify --file LIST.csv", "--column string", "--out string"}},
		{[]string{"verify", "--help"}, []string{"mailvet verify --file LIST.csv", "--json"}},
		{[]string{"verify", "a@b.example", "-h"}, []string{"mailvet verify [--json] ADDRESS..."}},
		{[]string{"keys", "-h"}, []string{"mailvet keys list", "mailvet keys revoke ID", "--label string"}},
		{[]string{"keys", "create", "--help"}, []string{"mailvet keys create [--label LABEL]", "(default mailvet-cli)"}},
		{[]string{"lists", "-h"}, []string{"mailvet lists show ID", "mailvet lists delete ID", "--format string", "(default csv)"}},
		{[]string{"lists", "results", "x", "-h"}, []string{"mailvet lists results ID", "--status string"}},
		{[]string{"usage", "-h"}, []string{"mailvet usage [--json]", "--json"}},
		{[]string{"version", "--help"}, []string{"mailvet version"}},
	} {
		code, stdout, stderr := run(t, nil, "", tc.args...)
		if code != ExitOK || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, stderr)
		}
		for _, want := range append(tc.want, "Usage:", "mailvet help") {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: help lacks %q:\n%s", tc.args, want, stdout)
			}
		}
		if strings.Contains(stdout, "Exit codes:") {
			t.Errorf("%q: printed the whole help, not the command's:\n%s", tc.args, stdout)
		}
	}
	// After "--", -h is an address; here a request the missing key refuses.
	if code, _, stderr := run(t, nil, "", "verify", "--", "-h"); code != ExitUsage || !strings.Contains(stderr, "MAILVET_API_KEY") {
		t.Errorf("verify -- -h: exit %d, %q", code, stderr)
	}
}

func TestFileFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path, first, column, want string
	}{
		{"in.csv", "name,Email,company\nAnn,ann@acme.example,Acme\n", "", "csv"},
		{"in.csv", "\ufeffann@acme.example\nzoe@acme.example\n", "", "text"},
		{"-", "zoe@acme.example", "", "text"},
		{"-", "email\nzoe@acme.example\n", "", "csv"},
		{"in.csv", "Ann,ann@acme.example\n", "", "csv"}, // a headerless CSV: the API names line 1
		{"-", "ann@acme.example\n", "email", "csv"},
		{"people.ndjson", `{"email":"ann@acme.example"}`, "", "ndjson"},
		{"people.JSONL", `{"email":"ann@acme.example"}`, "", "ndjson"},
		{"-", "", "", "csv"},
	}
	for _, tt := range tests {
		br := bufio.NewReader(strings.NewReader(tt.first))
		got, err := fileFormat(tt.path, br, tt.column)
		if err != nil || got != tt.want {
			t.Errorf("fileFormat(%q, %q, %q) = %q, %v; want %q", tt.path, tt.first, tt.column, got, err, tt.want)
		}
		// Peeking consumed nothing: the upload gets the file whole.
		if rest, _ := io.ReadAll(br); string(rest) != tt.first {
			t.Errorf("fileFormat consumed %q", tt.first[:len(tt.first)-len(rest)])
		}
	}
}

func TestProgressLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := newProgress(&out, true)
	rate, eta := 100.0, 6
	p.update(client.List{Verified: 400, Unique: 1000, RatePerSecond: &rate, ETASeconds: &eta})
	if got, want := p.line(), "[============>                 ]  400/1000  40%  100.0/s  ETA 6s "; got != want {
		t.Errorf("line = %q\nwant   %q", got, want)
	}
	p.update(client.List{Verified: 1000, Unique: 1000, RatePerSecond: &rate})
	if got, want := p.line(), "[==============================] 1000/1000 100%  100.0/s  ETA 0s "; got != want {
		t.Errorf("line = %q\nwant   %q", got, want)
	}
	p.finish()
	if !strings.HasPrefix(out.String(), "\r[") || !strings.HasSuffix(out.String(), "\n") || strings.Count(out.String(), "\r") != 3 {
		t.Errorf("drawn %q", out.String())
	}
	// Before the list starts, the API has no rate and no ETA yet.
	if got, want := newProgress(io.Discard, false).line(), "[>                             ] 0/0   0%  0.0/s  ETA ? "; got != want {
		t.Errorf("line = %q\nwant   %q", got, want)
	}
	var quiet bytes.Buffer
	q := newProgress(&quiet, false)
	q.update(client.List{Verified: 10, Unique: 10})
	q.finish()
	if quiet.Len() != 0 {
		t.Errorf("a disabled bar drew %q", quiet.String())
	}
}

// End-to-end against the real `api -dev -demo`: addresses, files as bulk lists, lists, keys and
// usage.
func TestAgainstServer(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, map[string]string{
		"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "100000",
		"MAILVET_PLAN_FREE_MONTHLY_CALLS":      "100000",
	})
	std := map[string]string{"MAILVET_API_KEY": s.StandardKey, "MAILVET_URL": s.URL}
	mgmt := map[string]string{"MAILVET_API_KEY": s.ProvisioningKey, "MAILVET_URL": s.URL}

	t.Run("addresses", func(t *testing.T) {
		code, stdout, stderr := run(t, std, "", "verify", "ann@acme.example", "zoe@acme.example", "--json", "ann@mial.example")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		want := [][2]string{{"ann@acme.example", "deliverable"}, {"zoe@acme.example", "undeliverable"}, {"ann@mial.example", "invalid"}}
		if len(lines) != len(want) {
			t.Fatalf("output %q", stdout)
		}
		for i, line := range lines {
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			// Exit 0 whatever the verdict; the JSON is the API's, nulls included.
			if r["email"] != want[i][0] || r["status"] != want[i][1] {
				t.Errorf("line %d: %s", i, line)
			}
			if _, ok := r["suggestion"]; !ok {
				t.Errorf("line %d lacks suggestion: %s", i, line)
			}
		}
		if !strings.Contains(lines[2], `"suggestion":"mail.example"`) || !strings.Contains(lines[0], `"suggestion":null`) {
			t.Errorf("lines %q", lines)
		}
	})

	t.Run("csv", func(t *testing.T) {
		dir := t.TempDir()
		var in strings.Builder
		in.WriteString("\ufeffname,Email,status\n") // a spreadsheet's BOM, and a column named like a result's
		var emails []string
		for i := range 1203 {
			var e string
			switch {
			case i%100 == 7:
				e = "ann@acme.example" // repeated: verified once, written on every row
			case i%100 == 8:
				e = " " // blank: an invalid address, not an error
			case i%10 == 0:
				e = fmt.Sprintf("user%04d@globex.example", i)
			default:
				e = fmt.Sprintf("user%04d@mailinator.com", i)
			}
			emails = append(emails, e)
			kind := "lead"
			if i == 3 {
				kind = "=1+2" // a formula someone typed into a form
			}
			fmt.Fprintf(&in, "Person %d,%s,%s\n", i, e, kind)
		}
		src, out := filepath.Join(dir, "list.csv"), filepath.Join(dir, "results.csv")
		if err := os.WriteFile(src, []byte(in.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := run(t, std, "", "verify", "--file", src, "--out", out)
		if code != ExitOK || stdout != "" || stderr != "" { // quiet when not on a terminal
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		file, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		// A file a person opens: the escaped download, with the byte-order mark Excel needs to
		// read it as UTF-8 (docs/lists.md, "Results").
		if !bytes.HasPrefix(file, []byte("\ufeff")) {
			t.Errorf("results file begins %q, not with a byte-order mark", file[:min(len(file), 8)])
		}
		records, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(file, []byte("\ufeff")))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		// The server's columns: the input's (its own "status" included), then the result's.
		wantHeader := "name,Email,status,status,reason,valid,confidence,failed_check,disposable,role,free_provider,catch_all,smtp_blocked,mx_found,mx_host,suggestion,smtp_code,smtp_enhanced_code,smtp_text"
		if got := strings.Join(records[0], ","); got != wantHeader {
			t.Fatalf("header %s\nwant   %s", got, wantHeader)
		}
		if len(records) != 1+len(emails) {
			t.Fatalf("%d rows, want %d", len(records)-1, len(emails))
		}
		for i, row := range records[1:] {
			// The file is one a person opens: the formula cell comes back escaped.
			kind := "lead"
			if i == 3 {
				kind = "'=1+2"
			}
			if row[0] != fmt.Sprintf("Person %d", i) || row[1] != emails[i] || row[2] != kind {
				t.Fatalf("row %d: %q: input columns not kept in order", i, row)
			}
			var want string
			switch {
			case i%100 == 7:
				want = "deliverable"
			case i%10 == 0:
				want = "catch_all"
			default:
				want = "invalid" // disposable, or the blank cell
			}
			if row[3] != want {
				t.Errorf("row %d (%q): status %q, want %q", i, emails[i], row[3], want)
			}
		}

		// The list stays on the account: lists list and show find it.
		code, stdout, stderr = run(t, std, "", "lists")
		var page client.ListPage
		if err := json.Unmarshal([]byte(stdout), &page); code != ExitOK || err != nil || len(page.Lists) != 1 {
			t.Fatalf("lists: exit %d, %s %s", code, stdout, stderr)
		}
		l := page.Lists[0]
		if l.Name != "list.csv" || l.State != client.ListCompleted || l.Rows != 1203 || l.EmailColumn != "Email" {
			t.Errorf("lists: %+v", l)
		}
		code, stdout, _ = run(t, std, "", "lists", "show", l.ID)
		var shown client.List
		if err := json.Unmarshal([]byte(stdout), &shown); code != ExitOK || err != nil || shown.ID != l.ID || shown.Counts.ByStatus["deliverable"] != 1 {
			t.Errorf("lists show: exit %d, %s", code, stdout)
		}
		// Results again, as NDJSON, deliverable only: the 12 rows of ann@acme.example in order.
		code, stdout, stderr = run(t, std, "", "lists", "results", l.ID, "--format", "ndjson", "--status", "deliverable")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if code != ExitOK || len(lines) != 12 || !strings.Contains(lines[0], `"name":"Person 7"`) || !strings.Contains(lines[11], `"name":"Person 1107"`) {
			t.Errorf("lists results: exit %d, %d lines, %s", code, len(lines), stderr)
		}
		// The CSV keeps formula cells escaped unless --raw-formulas asks for them as stored.
		for _, c := range []struct {
			args []string
			want string
		}{{nil, "Person 3,user0003@mailinator.com,'=1+2,"}, {[]string{"--raw-formulas"}, "Person 3,user0003@mailinator.com,=1+2,"}} {
			code, stdout, stderr = run(t, std, "", append([]string{"lists", "results", l.ID}, c.args...)...)
			if code != ExitOK || !strings.Contains(stdout, "\n"+c.want) {
				t.Errorf("lists results %v: exit %d, %s; no line starting %q", c.args, code, stderr, c.want)
			}
		}
		if code, _, stderr := run(t, std, "", "lists", "show", l.ID, "--raw-formulas"); code != ExitUsage || !strings.Contains(stderr, "--raw-formulas go with lists results") {
			t.Errorf("show --raw-formulas: exit %d, %s", code, stderr)
		}
		if code, _, stderr := run(t, std, "", "lists", "cancel", l.ID); code != ExitError || !strings.Contains(stderr, "list_finished (HTTP 409)") {
			t.Errorf("cancel a finished list: exit %d, %s", code, stderr)
		}
		if code, stdout, _ := run(t, std, "", "lists", "delete", l.ID); code != ExitOK || !strings.Contains(stdout, `"deleted":true`) {
			t.Errorf("delete: exit %d, %s", code, stdout)
		}
		if code, _, stderr := run(t, std, "", "lists", "show", l.ID); code != ExitError || !strings.Contains(stderr, "list_not_found") {
			t.Errorf("show a deleted list: exit %d, %s", code, stderr)
		}
		// A command that fails leaves an --out file it would have written as it was: the first
		// run's results are still there, and no temporary file is left beside them.
		before, err := os.ReadFile(out)
		if err != nil || len(before) == 0 {
			t.Fatalf("results file: %d bytes, %v", len(before), err)
		}
		if code, _, stderr := run(t, std, "", "lists", "results", l.ID, "--out", out); code != ExitError || !strings.Contains(stderr, "list_not_found") {
			t.Errorf("results of a deleted list: exit %d, %s", code, stderr)
		}
		if code, _, stderr := run(t, std, "name,email\nAnn,ann@acme.example\nZoe\n", "verify", "--file", "-", "--out", out); code != ExitError || !strings.Contains(stderr, "line 3") {
			t.Errorf("ragged CSV to --out: exit %d, %s", code, stderr)
		}
		if after, _ := os.ReadFile(out); !bytes.Equal(after, before) {
			t.Errorf("a failed command changed the --out file: %d bytes, was %d", len(after), len(before))
		}
		// No temporary file is left; the run's state for --resume is (docs/clients.md, "Resuming").
		if entries, _ := os.ReadDir(dir); len(entries) != 3 {
			t.Errorf("%d files in the folder, want list.csv, results.csv and .results.csv.mailvet-resume: %v", len(entries), entries)
		}
		// An unwritable --out is refused before anything is uploaded.
		if code, _, stderr := run(t, std, "", "verify", "--file", src, "--out", filepath.Join(dir, "no", "such", "dir.csv")); code != ExitError || !strings.Contains(stderr, "dir.csv") {
			t.Errorf("unwritable --out: exit %d, %s", code, stderr)
		}
		if _, stdout, _ := run(t, std, "", "lists"); strings.Count(stdout, `"id"`) != 0 {
			t.Errorf("an unwritable --out uploaded a list: %s", stdout)
		}

		// Standard input, a plain list of addresses, to standard output.
		code, stdout, stderr = run(t, std, "zoe@acme.example\nanyone@globex.example\n", "verify", "--file", "-")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if want := "email,status,reason,valid,confidence,failed_check,disposable,role,free_provider,catch_all,smtp_blocked,mx_found,mx_host,suggestion,smtp_code,smtp_enhanced_code,smtp_text\n" +
			"zoe@acme.example,undeliverable,mailbox_unknown,false,0.02,smtp,false,false,false,false,false,true,mx.acme.example,,550,5.1.1,No such user here\n" +
			// The catch-all domain was verified earlier in the test: its answer is the cached
			// one, with no RCPT and so no reply.
			"anyone@globex.example,catch_all,catch_all,false,0.6,,false,false,false,true,false,true,mx.globex.example,,,,\n"; stdout != want {
			t.Errorf("plain list output:\n%s\nwant\n%s", stdout, want)
		}
		// The API's refusals of a file are exit 1 with the line at fault.
		if code, _, stderr := run(t, std, "a,b\n1,2\n", "verify", "--file", "-", "--column", "email"); code != ExitError || !strings.Contains(stderr, "invalid_request (HTTP 400)") {
			t.Errorf("unknown column: exit %d, %s", code, stderr)
		}
		if code, _, stderr := run(t, std, "name,email\nAnn,ann@acme.example\nZoe\n", "verify", "--file", "-"); code != ExitError || !strings.Contains(stderr, "line 3") {
			t.Errorf("ragged CSV: exit %d, %s", code, stderr)
		}
		if code, _, stderr := run(t, std, "", "verify", "--file", filepath.Join(dir, "missing.csv")); code != ExitError || !strings.Contains(stderr, "missing.csv") {
			t.Errorf("missing file: exit %d, %s", code, stderr)
		}
	})

	t.Run("resume", func(t *testing.T) {
		// A finished run is not billed again: --resume downloads its list (issue 32).
		dir := t.TempDir()
		src, out := filepath.Join(dir, "again.txt"), filepath.Join(dir, "again.csv")
		if err := os.WriteFile(src, []byte("ann@acme.example\nzoe@acme.example\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := run(t, std, "", "verify", "--file", src, "--out", out); code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		before, _ := os.ReadFile(out)
		mc := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL))
		used, err := mc.UsageSummary(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, stdout, _ := run(t, std, "", "lists", "--limit", "100")
		code, _, stderr := run(t, std, "", "verify", "--file", src, "--out", out, "--resume")
		after, _ := os.ReadFile(out)
		if code != ExitOK || string(after) != string(before) || !strings.Contains(stderr, "nothing is verified or billed again") {
			t.Fatalf("resume: exit %d, %s\n%s\nwant\n%s", code, stderr, after, before)
		}
		if _, again, _ := run(t, std, "", "lists", "--limit", "100"); again != stdout {
			t.Errorf("--resume of a completed run uploaded a list:\n%s\nbefore\n%s", again, stdout)
		}
		if now, err := mc.UsageSummary(context.Background()); err != nil || now.CallsUsed != used.CallsUsed {
			t.Errorf("calls used %d after the resume, %d before (%v)", now.CallsUsed, used.CallsUsed, err)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		// A list canceled while verify --file waits for it is exit 1, with nothing written.
		var in strings.Builder
		for i := range 20000 {
			fmt.Fprintf(&in, "user%05d@globex.example\n", i) // catch-all: an SMTP round trip each
		}
		dir := t.TempDir()
		src, out := filepath.Join(dir, "big.txt"), filepath.Join(dir, "out.csv")
		if err := os.WriteFile(src, []byte(in.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte("previous results\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		type result struct {
			code   int
			stderr string
		}
		done := make(chan result, 1)
		go func() {
			code, _, stderr := run(t, std, "", "verify", "--file", src, "--out", out)
			done <- result{code, stderr}
		}()
		var id string
		for deadline := time.Now().Add(30 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			_, stdout, _ := run(t, std, "", "lists", "--limit", "100")
			var page client.ListPage
			_ = json.Unmarshal([]byte(stdout), &page)
			for _, l := range page.Lists {
				if l.Name == "big.txt" {
					id = l.ID
				}
			}
		}
		if id == "" {
			t.Fatal("the upload did not appear in lists")
		}
		code, stdout, stderr := run(t, std, "", "lists", "cancel", id)
		if code != ExitOK {
			t.Skipf("the list finished before it could be canceled: %s", stderr)
		}
		var l client.List
		if err := json.Unmarshal([]byte(stdout), &l); err != nil || l.State != client.ListCanceled {
			t.Fatalf("lists cancel: %s %v", stdout, err)
		}
		r := <-done
		if r.code != ExitError || !strings.Contains(r.stderr, "list "+id+" was canceled") {
			t.Errorf("verify of a canceled list: exit %d, %s", r.code, r.stderr)
		}
		if b, _ := os.ReadFile(out); string(b) != "previous results\n" {
			t.Errorf("a canceled list changed the --out file: %q", b)
		}
	})

	t.Run("keys and usage", func(t *testing.T) {
		code, stdout, stderr := run(t, mgmt, "", "keys", "create", "--label", "from-cli")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var k client.CreatedKey
		if err := json.Unmarshal([]byte(stdout), &k); err != nil || k.Label != "from-cli" || !strings.HasPrefix(k.Key, "sk_live_") {
			t.Fatalf("create: %s %v", stdout, err)
		}
		code, stdout, _ = run(t, mgmt, "", "keys", "list")
		var l client.KeyList
		if err := json.Unmarshal([]byte(stdout), &l); code != ExitOK || err != nil || l.Count != 2 {
			t.Fatalf("list: exit %d, %s", code, stdout)
		}
		if code, _, stderr := run(t, mgmt, "", "keys", "revoke", k.ID); code != ExitOK {
			t.Fatalf("revoke: exit %d, %s", code, stderr)
		}
		// The API's refusal is exit 1 with its message and action.
		code, _, stderr = run(t, mgmt, "", "keys", "revoke", k.ID)
		if code != ExitError || !strings.Contains(stderr, "key_not_found (HTTP 404)") || !strings.Contains(stderr, "GET /v1/management/keys") ||
			!strings.Contains(stderr, ", request id ") {
			t.Errorf("revoke twice: exit %d, %s", code, stderr)
		}
		code, stdout, _ = run(t, mgmt, "", "usage")
		var u struct {
			Summary client.UsageSummary `json:"summary"`
			Days    []client.DayUsage   `json:"days"`
		}
		if err := json.Unmarshal([]byte(stdout), &u); code != ExitOK || err != nil || u.Summary.Tier != "free" || len(u.Days) != 30 {
			t.Errorf("usage: exit %d, %s", code, stdout)
		}
		// A standard key cannot manage keys.
		if code, _, stderr := run(t, std, "", "keys", "list"); code != ExitError || !strings.Contains(stderr, "wrong_key_type") {
			t.Errorf("keys with a standard key: exit %d, %s", code, stderr)
		}
	})
}

// Interrupted while its first progress poll is still out, verify --file cancels the list it
// uploaded (by the upload's id: the failed poll has none) so that the rest is not billed.
func TestVerifyFileInterruptedDuringFirstPoll(t *testing.T) {
	t.Parallel()
	const id = "0199a1b2-0000-7000-8000-000000000001"
	canceled := make(chan string, 1)
	polled := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/email/lists":
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"running","rows":1,"unique":1}`, id)
		case r.Method == http.MethodGet:
			select {
			case polled <- struct{}{}:
			default:
			}
			<-r.Context().Done() // the poll never answers
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel"):
			canceled <- r.URL.Path
			fmt.Fprintf(w, `{"id":%q,"state":"canceled","rows":1,"unique":1}`, id)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	in := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(in, []byte("ann@acme.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-polled
		cancel() // Ctrl-C
	}()
	var out, errOut bytes.Buffer
	env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": srv.URL}
	code := Run(ctx, []string{"verify", "--file", in}, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	select {
	case path := <-canceled:
		if path != "/v1/email/lists/"+id+"/cancel" {
			t.Fatalf("canceled %s, want list %s", path, id)
		}
	default:
		t.Fatalf("the list was not canceled (exit %d): %s", code, errOut.String())
	}
	if code == ExitOK || !strings.Contains(errOut.String(), "interrupted: list "+id+" canceled; `mailvet lists results "+id+"` has what was verified") ||
		strings.Contains(errOut.String(), "context canceled") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

// When verify --file's list is running and a poll fails, the message names the list, which keeps
// running and is billed, so that the user can find it; an upload refused names the file.
func TestFailureNamesTheListAndTheFile(t *testing.T) {
	t.Parallel()
	const id = "0199a1b2-0000-7000-8000-000000000002"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost && strings.Contains(r.URL.RawQuery, "name=bad.txt") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_request","message":"Line 3 is longer than the limit.","action":"Fix line 3.","docs":"d","line":3}`)
			return
		}
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued","rows":1,"unique":1}`, id)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":"datastore_error","message":"The datastore request failed.","action":"Retry later.","docs":"d"}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "in.txt"), filepath.Join(dir, "bad.txt")
	for _, p := range []string{good, bad} {
		if err := os.WriteFile(p, []byte("ann@acme.example\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": srv.URL}
	code, _, stderr := run(t, env, "", "verify", "--file", good)
	if code != ExitError || !strings.Contains(stderr, "list "+id) || !strings.Contains(stderr, "datastore_error (HTTP 500)") || strings.Contains(stderr, "mailvet: mailvet") {
		t.Errorf("failed poll: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = run(t, env, "", "verify", "--file", bad)
	if code != ExitError || !strings.Contains(stderr, bad+": ") || !strings.Contains(stderr, "invalid_request (HTTP 400)") {
		t.Errorf("refused upload: exit %d, stderr %q", code, stderr)
	}
}

// An error of the API is printed for a person: its message, then its action, then the code,
// status and request id for a support request; never the client's internals (which method,
// which slice of the input; the "VerifyBatch: the request with emails[0:1] …").
func TestErrorsInPlainWords(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-42")
		var body struct {
			Emails []string `json:"emails"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if n > 1 {
			w.WriteHeader(http.StatusPaymentRequired)
			fmt.Fprint(w, `{"error":"payment_required","message":"This request of 50 emails could take this month's overage past the hard spend cap of EUR 10.00 (EUR 9.99 so far); the cap leaves room for 2 more emails.","action":"Send at most 2 emails until reset_at (the start of the next UTC month), or raise or remove the hard spend cap in the billing settings.","docs":"http://x/docs/errors#payment_required","hard_cap_eur":10,"current_overage_eur":9.99,"room":2,"reset_at":"2026-12-01T00:00:00Z"}`)
			return
		}
		results := make([]string, len(body.Emails))
		for i, e := range body.Emails {
			results[i] = fmt.Sprintf(`{"email":%q,"status":"deliverable","reason":"accepted"}`, e)
		}
		fmt.Fprintf(w, `{"results":[%s],"count":%d}`, strings.Join(results, ","), len(results))
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": srv.URL}
	addrs := make([]string, 60) // two requests: the first answered, the second refused
	for i := range addrs {
		addrs[i] = fmt.Sprintf("u%d@acme.example", i)
	}
	code, stdout, stderr := run(t, env, "", append([]string{"verify"}, addrs...)...)
	if code != ExitError {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := "mailvet: 50 of 60 addresses were verified (their results are printed) before: This request of 50 emails could take" +
		" this month's overage past the hard spend cap of EUR 10.00 (EUR 9.99 so far); the cap leaves room for 2 more emails.\n" +
		"  What to do: Send at most 2 emails until reset_at (the start of the next UTC month), or raise or remove the hard spend cap in the billing settings.\n" +
		"  Details: payment_required (HTTP 402), request id req-42, http://x/docs/errors#payment_required\n"
	if stderr != want {
		t.Errorf("stderr\n%s\nwant\n%s", stderr, want)
	}
	for _, internal := range []string{"VerifyBatch", "emails[", "POST ", "mailvet: mailvet"} {
		if strings.Contains(stderr, internal) {
			t.Errorf("stderr shows the client's internals (%q): %s", internal, stderr)
		}
	}
	if n := strings.Count(stdout, "\n"); n != 50 {
		t.Errorf("%d result lines printed, want the 50 verified", n)
	}
	// A single address refused at once: the message and the action only.
	calls.Store(1)
	_, _, stderr = run(t, env, "", "verify", "ann@acme.example")
	if !strings.HasPrefix(stderr, "mailvet: This request of 50 emails") || strings.Contains(stderr, "were verified") {
		t.Errorf("one address: %q", stderr)
	}
	// No answer at all: where the request went and what to check, in plain words.
	env["MAILVET_URL"] = "http://127.0.0.1:1"
	_, _, stderr = run(t, env, "", "verify", "ann@acme.example")
	if !strings.HasPrefix(stderr, "mailvet: could not reach the API at http://127.0.0.1:1: ") || !strings.Contains(stderr, "What to do: check MAILVET_URL") ||
		strings.Contains(stderr, "VerifyBatch") || strings.Contains(stderr, "emails[") {
		t.Errorf("unreachable: %q", stderr)
	}
}

// A file given to verify --file is sent again after the API's 503 with Retry-After (a rolling
// restart), whole, with the same Idempotency-Key, as the client does for any body it can rewind
// (docs/clients.md, "Network failures"); standard input, read as it is sent, is not.
func TestVerifyFileUploadRetriedAfter503(t *testing.T) {
	t.Parallel()
	const id = "0199a1b2-0000-7000-8000-000000000003"
	const input = "ann@acme.example\r\nzoe@acme.example\r\n"
	var (
		mu      sync.Mutex
		uploads []string // the bodies uploaded, then their Idempotency-Keys
		keys    []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/email/lists":
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			uploads = append(uploads, string(b))
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			n := len(uploads)
			mu.Unlock()
			if n%2 == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `{"error":"service_unavailable","message":"The service is temporarily unavailable.","action":"Retry after Retry-After.","docs":"d"}`)
				return
			}
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued","rows":2,"unique":2}`, id)
		case r.URL.Path == "/v1/email/lists/"+id:
			fmt.Fprintf(w, `{"id":%q,"state":"completed","format":"text","email_column":"email","rows":2,"unique":2,"verified":2}`, id)
		case r.URL.Path == "/v1/email/lists/"+id+"/results":
			w.Header().Set("Content-Type", "text/csv")
			fmt.Fprintf(w, "%s\nann@acme.example,%s\nzoe@acme.example,%s\n", resultHeader("email"), resultCells("deliverable"), resultCells("undeliverable"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	in := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(in, []byte(input), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": srv.URL}
	code, stdout, stderr := run(t, env, "", "verify", "--file", in)
	mu.Lock()
	got, gotKeys := slices.Clone(uploads), slices.Clone(keys)
	mu.Unlock()
	if code != ExitOK || !strings.Contains(stdout, "zoe@acme.example,undeliverable") {
		t.Fatalf("exit %d, stdout %q, stderr %q, uploads %q", code, stdout, stderr, got)
	}
	if len(got) != 2 || got[0] != input || got[1] != input || gotKeys[0] == "" || gotKeys[0] != gotKeys[1] {
		t.Fatalf("uploads %q with keys %q, want the whole file twice with one Idempotency-Key", got, gotKeys)
	}
	// Standard input cannot be read twice: the 503 is the answer.
	code, _, stderr = run(t, env, input, "verify", "--file", "-")
	if code != ExitError || !strings.Contains(stderr, "service_unavailable (HTTP 503)") {
		t.Fatalf("standard input: exit %d, stderr %q", code, stderr)
	}
}
