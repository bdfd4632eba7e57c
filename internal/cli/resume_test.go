package cli

import (
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
	"testing"
)

// resultHeader is a results CSV's header after the given input columns.
func resultHeader(input ...string) string {
	return strings.Join(append(input, resultColumns...), ",")
}

// resultCells is a row's 16 result cells for status, or 16 empty cells.
func resultCells(status string) string {
	cells := make([]string, len(resultColumns))
	if status != "" {
		cells[0], cells[1], cells[2] = status, "accepted", "true"
	}
	return strings.Join(cells, ",")
}

// A re-run with --resume of an interrupted verify --file uploads only the addresses the first
// list did not verify, and writes every row of the first list with the missing results filled in,
// in input order (issue: each re-run billed the whole file again). A fake API: the first list is
// canceled with 2 of its 3 unique addresses verified.
func TestVerifyFileResumesACanceledList(t *testing.T) {
	t.Parallel()
	const first, second = "0199a1b2-0000-7000-8000-00000000000a", "0199a1b2-0000-7000-8000-00000000000b"
	var (
		mu      sync.Mutex
		uploads []string // the bodies uploaded
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/email/lists":
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			uploads = append(uploads, string(b))
			n := len(uploads)
			mu.Unlock()
			id := first
			if n > 1 {
				id = second
			}
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued","rows":4,"unique":3}`, id)
		case r.URL.Path == "/v1/email/lists/"+first:
			fmt.Fprintf(w, `{"id":%q,"name":"in.csv","state":"canceled","format":"csv","email_column":"Email","rows":4,"unique":3,"verified":2}`, first)
		case r.URL.Path == "/v1/email/lists/"+second:
			fmt.Fprintf(w, `{"id":%q,"state":"completed","format":"text","email_column":"email","rows":1,"unique":1,"verified":1}`, second)
		case r.URL.Path == "/v1/email/lists/"+first+"/results":
			w.Header().Set("Content-Type", "text/csv")
			fmt.Fprintf(w, "%s\nAnn,ann@acme.example,%s\nZoe,-zoe@acme.example,%s\nBob,BOB@acme.example,%s\nAnn2,ann@acme.example,%s\n",
				resultHeader("name", "Email"), resultCells("deliverable"), resultCells(""), resultCells("undeliverable"), resultCells("deliverable"))
		case r.URL.Path == "/v1/email/lists/"+second+"/results":
			w.Header().Set("Content-Type", "text/csv")
			fmt.Fprintf(w, "%s\n'-zoe@acme.example,%s\n", resultHeader("email"), resultCells("catch_all"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.csv"), filepath.Join(dir, "out.csv")
	if err := os.WriteFile(in, []byte("name,Email\nAnn,ann@acme.example\nZoe,-zoe@acme.example\nBob,BOB@acme.example\nAnn2,ann@acme.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(uploads)
	}
	env := map[string]string{"MAILVET_API_KEY": "sk_live_x", "MAILVET_URL": srv.URL}
	// The first run: its list ends canceled; the message says how to go on.
	code, _, stderr := run(t, env, "", "verify", "--file", in, "--out", out)
	if code != ExitError || !strings.Contains(stderr, "was canceled") || !strings.Contains(stderr, "--resume") {
		t.Fatalf("first run: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a canceled run wrote --out")
	}
	// The re-run: one upload of the one address without a result, the output merged.
	code, _, stderr = run(t, env, "", "verify", "--file", in, "--out", out, "--resume")
	if code != ExitOK {
		t.Fatalf("resume: exit %d, %s", code, stderr)
	}
	if u := got(); len(u) != 2 || u[1] != "-zoe@acme.example\n" {
		t.Fatalf("uploads %q, want the whole file once, then only the address not verified", u)
	}
	file, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Merged, the file begins with the byte-order mark of the API's escaped download, as the
	// file of a run that was not interrupted does (docs/lists.md, "Results").
	if !strings.HasPrefix(string(file), byteOrderMark) {
		t.Errorf("merged output begins %q, not with a byte-order mark", file[:min(len(file), 8)])
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(file), byteOrderMark))).ReadAll()
	if err != nil || len(rows) != 5 {
		t.Fatalf("output %v %v", rows, err)
	}
	want := [][2]string{{"Ann", "deliverable"}, {"Zoe", "catch_all"}, {"Bob", "undeliverable"}, {"Ann2", "deliverable"}}
	for i, w := range want {
		if r := rows[i+1]; r[0] != w[0] || r[2] != w[1] {
			t.Errorf("row %d: %q, want %s %s", i+1, r, w[0], w[1])
		}
	}
	// Once more: every address has a result, nothing is uploaded.
	if code, _, stderr = run(t, env, "", "verify", "--file", in, "--out", out, "--resume"); code != ExitOK || len(got()) != 2 ||
		!strings.Contains(stderr, "nothing is verified or billed again") {
		t.Fatalf("second resume: exit %d, %d uploads, %s", code, len(got()), stderr)
	}
	var st resumeState
	raw, _ := os.ReadFile(statePath(out))
	if err := json.Unmarshal(raw, &st); err != nil || st.Base != first || len(st.Rest) != 1 || st.Rest[0] != second {
		t.Errorf("state %s %v", raw, err)
	}
	// A changed file is not resumed: it is verified whole.
	if err := os.WriteFile(in, []byte("name,Email\nNew,new@acme.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run(t, env, "", "verify", "--file", in, "--out", out, "--resume")
	if len(got()) != 3 || !strings.Contains(stderr, "no earlier run") {
		t.Errorf("changed file: exit %d, %d uploads, %s", code, len(got()), stderr)
	}
	// --resume needs --out and a file.
	for _, args := range [][]string{{"verify", "--file", in, "--resume"}, {"verify", "--file", "-", "--out", out, "--resume"}, {"verify", "a@b.example", "--resume"}} {
		if code, _, stderr := run(t, env, "", args...); code != ExitUsage || !strings.Contains(stderr, "--resume") {
			t.Errorf("%q: exit %d, %s", args, code, stderr)
		}
	}
}
