package cli

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mailvet/mailvet/client"
)

// Resuming `verify --file` (docs/clients.md, "Resuming"). A run with --out remembers, in a state
// file beside it, the input's digest and the list it uploaded. A re-run with --resume of the same
// file into the same --out uses that list instead of uploading the file again: it waits for it if
// it still runs, downloads it if it completed, and when it ended before verifying everything
// (interrupted, canceled, failed) uploads only the addresses it did not verify, as a list of their
// own, and writes the first list's rows with the missing results filled in. So each address is
// billed once, however often the command is run.

// resumeState is the state file's content.
type resumeState struct {
	Input  string `json:"input_sha256"` // the input file's SHA-256, hex
	Column string `json:"column"`       // --column as given
	// Base is the list of the whole file: its results give the output's rows, in input order.
	Base string `json:"list"`
	// Rest are the lists of the addresses Base did not verify, oldest first.
	Rest []string `json:"rest,omitempty"`
}

// maxStateBytes bounds the state file read back: a few ids and a digest.
const maxStateBytes = 64 << 10

// statePath is the state file of the output out: hidden, beside it.
func statePath(out string) string {
	return filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".mailvet-resume")
}

func loadState(out string) (resumeState, bool) {
	var st resumeState
	f, err := os.Open(statePath(out))
	if err != nil {
		return st, false
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxStateBytes))
	if err != nil || json.Unmarshal(raw, &st) != nil || st.Base == "" || st.Input == "" {
		return resumeState{}, false
	}
	return st, true
}

// saveState writes the state file whole (a temporary file renamed over it), readable by the
// user only: it names the lists that hold the file's addresses.
func saveState(out string, st resumeState) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	path := statePath(out)
	tmp := path + ".part"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// byteOrderMark begins an escaped results CSV (docs/lists.md, "Results").
const byteOrderMark = "\ufeff"

// resultColumns are the columns a results CSV adds after the input's (docs/lists.md, "Results").
var resultColumns = []string{"status", "reason", "valid", "confidence", "failed_check", "disposable", "role",
	"free_provider", "catch_all", "smtp_blocked", "mx_found", "mx_host", "suggestion", "smtp_code",
	"smtp_enhanced_code", "smtp_text"}

// resumeRun finishes the run st describes into out. handled is false when there is nothing to
// resume (the base list is gone: finished lists expire), and the caller verifies the whole file.
func (e env) resumeRun(ctx context.Context, c *client.Client, st *resumeState, outPath string, out *outFile) (handled bool, err error) {
	base, err := c.List(ctx, st.Base)
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Code == client.CodeListNotFound {
		fmt.Fprintf(e.stderr, "mailvet: the earlier run's list %s is gone (expired or deleted): verifying the whole file\n", st.Base)
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("list %s: %w", st.Base, err)
	}
	if !base.Done() {
		fmt.Fprintf(e.stderr, "mailvet: resuming: list %s is still %s; waiting for it\n", base.ID, base.State)
		if base, err = e.waitList(ctx, c, base.ID, true); err != nil {
			return true, err
		}
	}
	if base.State == client.ListCompleted {
		fmt.Fprintf(e.stderr, "mailvet: resuming: list %s has every result; downloading it (nothing is verified or billed again)\n", base.ID)
		if err := e.download(ctx, c, base.ID, client.ResultsOptions{}, out, false); err != nil {
			return true, err
		}
		return true, out.commit()
	}
	// The base list ended early: the results of its unverified rows come from the rest lists.
	emailCol := "email"
	if base.Format == client.ListCSV {
		emailCol = base.EmailColumn
	}
	missing, err := e.unverified(ctx, c, base.ID, emailCol)
	if err != nil {
		return true, err
	}
	found := map[string][]string{}
	for _, id := range st.Rest {
		l, err := c.List(ctx, id)
		if errors.As(err, &apiErr) && apiErr.Code == client.CodeListNotFound {
			continue // expired: its addresses are verified again below
		}
		if err != nil {
			return true, fmt.Errorf("list %s: %w", id, err)
		}
		if !l.Done() {
			if _, err := e.waitList(ctx, c, id, true); err != nil {
				return true, err
			}
		}
		if err := e.collect(ctx, c, id, found); err != nil {
			return true, err
		}
	}
	var todo []string
	for _, a := range missing {
		if _, ok := found[a]; !ok {
			todo = append(todo, a)
		}
	}
	if len(todo) > 0 {
		fmt.Fprintf(e.stderr, "mailvet: resuming: list %s verified %d of %d addresses; verifying the other %d\n", base.ID, base.Verified, base.Unique, len(todo))
		body := strings.Join(todo, "\n") + "\n"
		l, err := c.UploadList(ctx, strings.NewReader(body), client.ListUpload{Format: client.ListText, Name: truncName(base.Name + " (resumed)")})
		if err != nil {
			return true, err
		}
		st.Rest = append(st.Rest, l.ID)
		if err := saveState(outPath, *st); err != nil {
			return true, fmt.Errorf("%s: %w", statePath(outPath), err)
		}
		if l, err = e.waitList(ctx, c, l.ID, true); err != nil {
			return true, err
		}
		if err := e.collect(ctx, c, l.ID, found); err != nil {
			return true, err
		}
		if err := finalState(l, true); err != nil {
			return true, err
		}
	} else {
		fmt.Fprintf(e.stderr, "mailvet: resuming: every address has a result in lists %s; nothing is verified or billed again\n", strings.Join(append([]string{base.ID}, st.Rest...), ", "))
	}
	if err := e.merge(ctx, c, base.ID, emailCol, found, out); err != nil {
		return true, err
	}
	return true, out.commit()
}

// truncName keeps a list name within the API's 200 characters.
func truncName(s string) string {
	if r := []rune(s); len(r) > 200 {
		return string(r[:200])
	}
	return s
}

// addressKey is how the API tells addresses apart in a list (docs/lists.md): trimmed and
// lower-cased. cell is a results CSV cell, with the apostrophe the API puts before a formula cell
// taken off again.
func addressKey(cell string) string {
	if len(cell) > 1 && cell[0] == '\'' && strings.ContainsRune("=+-@\t\r", rune(cell[1])) {
		cell = cell[1:]
	}
	return strings.ToLower(strings.TrimSpace(cell))
}

// resultsTable opens list id's results CSV and checks its header: the input's columns, then
// resultColumns. It answers the reader, positioned at the first row, the header, and the index
// of the email column (the first input column named emailCol).
func (e env) resultsTable(ctx context.Context, c *client.Client, id, emailCol string) (io.ReadCloser, *csv.Reader, []string, int, error) {
	rc, err := c.ListResults(ctx, id, client.ResultsOptions{})
	if err != nil {
		return nil, nil, nil, 0, err
	}
	r := csv.NewReader(rc)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], byteOrderMark) // the escaped download's (download)
	}
	n := len(header) - len(resultColumns)
	if err != nil || n < 1 || !slices.Equal(header[n:], resultColumns) {
		rc.Close()
		return nil, nil, nil, 0, fmt.Errorf("list %s: the results have an unexpected header %q (%v)", id, header, err)
	}
	col := slices.Index(header[:n], emailCol)
	if col < 0 {
		rc.Close()
		return nil, nil, nil, 0, fmt.Errorf("list %s: no column %q in the results' header", id, emailCol)
	}
	return rc, r, header, col, nil
}

// unverified is the addresses of list id whose rows have no result, each once, in input order.
func (e env) unverified(ctx context.Context, c *client.Client, id, emailCol string) ([]string, error) {
	rc, r, _, col, err := e.resultsTable(ctx, c, id, emailCol)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	seen := map[string]bool{}
	var out []string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: reading the results: %w", id, err)
		}
		status := rec[len(rec)-len(resultColumns)]
		if k := addressKey(rec[col]); status == "" && k != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
}

// collect adds the result cells of list id's verified rows to found, by address.
func (e env) collect(ctx context.Context, c *client.Client, id string, found map[string][]string) error {
	rc, r, _, col, err := e.resultsTable(ctx, c, id, "email")
	if err != nil {
		return err
	}
	defer rc.Close()
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: reading the results: %w", id, err)
		}
		res := rec[len(rec)-len(resultColumns):]
		if res[0] != "" {
			found[addressKey(rec[col])] = slices.Clone(res)
		}
	}
}

// merge writes list id's results to w with the result cells of its unverified rows taken from
// found: the rows and the input's columns as the list has them, in input order.
func (e env) merge(ctx context.Context, c *client.Client, id, emailCol string, found map[string][]string, w io.Writer) error {
	rc, r, header, col, err := e.resultsTable(ctx, c, id, emailCol)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The file of a run that was not interrupted is the API's escaped download, which begins
	// with a byte-order mark for spreadsheets (docs/lists.md, "Results"): so does this one.
	if _, err := io.WriteString(w, byteOrderMark); err != nil {
		return err
	}
	out := csv.NewWriter(w)
	if err := out.Write(header); err != nil {
		return err
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("list %s: reading the results: %w", id, err)
		}
		res := rec[len(rec)-len(resultColumns):]
		if res[0] == "" {
			if got, ok := found[addressKey(rec[col])]; ok {
				copy(res, got)
			}
		}
		if err := out.Write(rec); err != nil {
			return err
		}
	}
	out.Flush()
	return out.Error()
}
