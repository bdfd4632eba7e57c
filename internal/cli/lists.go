package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/listname"
	"github.com/mailvet/mailvet/internal/safetext"
)

// listPoll is how often `verify --file` reads its list's progress.
const listPoll = 500 * time.Millisecond

// verifyFile verifies a file through a bulk list (docs/lists.md): it uploads the file as it is,
// streamed, follows the list's progress, then downloads the results CSV (the input's columns,
// then the result's) to outPath, or standard output. With outPath a file's run is remembered
// beside it (resume.go), so that a re-run with resume verifies and bills only what no earlier
// run verified (docs/clients.md, "Resuming").
func (e env) verifyFile(ctx context.Context, c *client.Client, path, column, outPath string, resume bool) error {
	// The input's digest names the run: a changed file is a new one, never a resumed one.
	sum := ""
	if outPath != "" && path != "-" {
		var err error
		if sum, err = fileSHA256(path); err != nil {
			return err
		}
	}
	var in io.Reader = e.stdin
	var file *os.File
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in, file = f, f
	}
	br := bufio.NewReaderSize(in, 64<<10)
	format, err := fileFormat(path, br, column)
	if err != nil {
		return err
	}
	body := uploadBody(file, br)
	// Check the output before uploading, so that an unwritable --out costs nothing.
	var out io.Writer = e.stdout
	var outF *outFile
	if outPath != "" {
		if outF, err = createOut(outPath); err != nil {
			return err
		}
		defer outF.discard()
		out = outF
	}
	start := time.Now()
	if resume {
		st, ok := loadState(outPath)
		if ok && st.Input == sum && st.Column == column {
			handled, err := e.resumeRun(ctx, c, &st, outPath, outF)
			if handled {
				return err
			}
		} else {
			fmt.Fprintf(e.stderr, "mailvet: no earlier run of %s into %s to resume: verifying the whole file\n", path, outPath)
		}
	}
	name := "mailvet-cli"
	if n := listname.FromFile(path); path != "-" && n != "" {
		name = n // a file name may hold what the API refuses in a name, such as a line break
	}
	l, err := c.UploadList(ctx, body, client.ListUpload{Format: format, Column: column, Name: name})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	saved := false
	if sum != "" {
		saved = saveState(outPath, resumeState{Input: sum, Column: column, Base: l.ID}) == nil
	}
	l, err = e.waitList(ctx, c, l.ID, saved)
	if err != nil {
		return err
	}
	if err := finalState(l, saved); err != nil {
		return err
	}
	if err := e.download(ctx, c, l.ID, client.ResultsOptions{}, out, outF == nil); err != nil {
		return err
	}
	if outF != nil {
		if err := outF.commit(); err != nil {
			return err
		}
	}
	if isTerminal(e.stderr) {
		fmt.Fprintf(e.stderr, "%d rows (%d unique addresses) verified in %s; list %s\n", l.Rows, l.Unique,
			time.Since(start).Round(time.Second), l.ID)
	}
	return nil
}

// uploadBody is what verify --file uploads: the file itself, sought back to where br began
// reading it (fileFormat peeked at it), so that the client can send it again after a 503 or a
// lost answer (it rewinds an io.Seeker; docs/clients.md, "Network failures"); else (standard
// input, a pipe given as a path) br, which holds the peeked bytes and is sent once.
func uploadBody(file *os.File, br *bufio.Reader) io.Reader {
	if file == nil {
		return br
	}
	at, err := file.Seek(0, io.SeekCurrent)
	if err != nil {
		return br
	}
	if _, err := file.Seek(at-int64(br.Buffered()), io.SeekStart); err != nil {
		return br
	}
	return file
}

// resumeHint is what an interrupted or canceled run says when its state is saved.
const resumeHint = "; run the same command with --resume to verify the rest without paying again for what was verified"

// waitList follows list id's progress on standard error until it ends. Interrupted, it cancels
// the list, so that what was not verified is not billed.
func (e env) waitList(ctx context.Context, c *client.Client, id string, resumable bool) (client.List, error) {
	prog := newProgress(e.stderr, isTerminal(e.stderr))
	// WaitList answers a zero List when its first poll fails: errors name the id it was given.
	l, err := c.WaitList(ctx, id, listPoll, prog.update)
	prog.finish()
	if err != nil {
		if ctx.Err() != nil {
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, cerr := c.CancelList(stop, id); cerr == nil {
				// The interrupt is the user's own: no "context canceled" to puzzle over.
				hint := ""
				if resumable {
					hint = resumeHint
				}
				return l, fmt.Errorf("interrupted: list %s canceled; `mailvet lists results %s` has what was verified%s", id, id, hint)
			}
		}
		return l, fmt.Errorf("list %s: %w", id, err)
	}
	return l, nil
}

// finalState is the error of a list that ended without completing (docs/clients.md, "Exit
// codes": exit 1).
func finalState(l client.List, resumable bool) error {
	hint := ""
	if resumable {
		hint = resumeHint
	}
	switch l.State {
	case client.ListFailed:
		return fmt.Errorf("list %s failed: %s%s", l.ID, l.Error, hint)
	case client.ListCanceled:
		return fmt.Errorf("list %s was canceled after %d of %d addresses; `mailvet lists results %s` has what was verified%s", l.ID, l.Verified, l.Unique, l.ID, hint)
	}
	return nil
}

// fileFormat says how the API should read the file (docs/clients.md, "Files"): NDJSON for
// .ndjson and .jsonl files, else CSV, unless the first line is a lone address and no --column is
// given: then the file is a plain list, one address a line. It peeks at the first line without
// consuming it.
func fileFormat(path string, br *bufio.Reader, column string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".ndjson", ".jsonl":
		return client.ListNDJSON, nil
	}
	if column != "" {
		return client.ListCSV, nil
	}
	first, err := br.Peek(br.Size())
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	line := strings.TrimSpace(strings.TrimPrefix(string(first), "\ufeff"))
	if strings.Contains(line, "@") && !strings.ContainsAny(line, ",;\t\"") {
		return client.ListText, nil
	}
	return client.ListCSV, nil
}

// download copies a list's results to w. An escaped CSV download begins with a byte-order mark,
// which Excel needs to read the file as UTF-8 (docs/lists.md, "Results"): a file keeps it, and
// standard output (a terminal, or a pipe into another program: stdout) does not.
func (e env) download(ctx context.Context, c *client.Client, id string, opts client.ResultsOptions, w io.Writer, stdout bool) error {
	rc, err := c.ListResults(ctx, id, opts)
	if err != nil {
		return err
	}
	defer rc.Close()
	var r io.Reader = rc
	if stdout {
		br := bufio.NewReader(rc)
		if bom, _ := br.Peek(len(byteOrderMark)); string(bom) == byteOrderMark {
			_, _ = br.Discard(len(bom))
		}
		r = br
	}
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("list %s: downloading the results: %w", id, err)
	}
	return nil
}

// lists is `mailvet lists [list|show ID|results ID|cancel ID|delete ID]`.
func (e env) lists(ctx context.Context, args []string) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("lists "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal")
	limit := fs.Int("limit", 0, "lists per page, 1 to 100 (lists list)")
	cursor := fs.String("cursor", "", "next_cursor of the previous page (lists list)")
	format := fs.String("format", "csv", "csv or ndjson (lists results)")
	status := fs.String("status", "", "comma-separated statuses to keep (lists results)")
	out := fs.String("out", "", "where to write the results (lists results; default standard output)")
	rawFormulas := fs.Bool("raw-formulas", false, "CSV cells exactly as stored, without the apostrophe before formula cells (lists results)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(rest) != 0 {
			return usagef("lists list: unexpected argument %q", rest[0])
		}
	case "show", "results", "cancel", "delete":
		if len(rest) != 1 {
			return usagef("lists %s: give one list ID", sub)
		}
	default:
		return usagef("lists: unknown subcommand %q (list, show, results, cancel, delete)", sub)
	}
	if sub != "results" && (*status != "" || *out != "" || *format != "csv" || *rawFormulas) {
		return usagef("lists %s: --format, --status, --out and --raw-formulas go with lists results", sub)
	}
	if sub == "results" && *asJSON {
		// The rows are CSV unless --format says otherwise: --json would promise what a JSON reader
		// then fails on.
		return usagef("lists results: --json does not go with lists results; --format ndjson downloads the rows as NDJSON")
	}
	if sub != "list" && (*limit != 0 || *cursor != "") {
		return usagef("lists %s: --limit and --cursor go with lists list", sub)
	}
	if *format != "csv" && *format != "ndjson" {
		return usagef("lists results: --format is csv or ndjson, not %q", *format)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	human := !*asJSON && isTerminal(e.stdout)
	switch sub {
	case "list":
		p, err := c.Lists(ctx, client.ListsPage{Limit: *limit, Cursor: *cursor})
		if err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(p)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tROWS\tUNIQUE\tPROGRESS\tCREATED\tNAME")
		for _, l := range p.Lists {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f%%\t%s\t%s\n", l.ID, l.State, l.Rows, l.Unique, 100*l.Progress, l.CreatedAt.Format(time.RFC3339), safetext.Escape(l.Name))
		}
		tw.Flush()
		if p.NextCursor != "" {
			fmt.Fprintf(e.stdout, "more: mailvet lists list --cursor %s\n", p.NextCursor)
		}
	case "show":
		l, err := c.List(ctx, rest[0])
		if err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(l)
		}
		writeList(e.stdout, l)
	case "results":
		var statuses []string
		if *status != "" {
			statuses = strings.Split(*status, ",")
		}
		// The results are most often a file a person opens in a spreadsheet: formula cells stay
		// escaped unless asked (docs/lists.md, "Formula cells").
		opts := client.ResultsOptions{Format: *format, Statuses: statuses, RawFormulas: *rawFormulas}
		if *out == "" {
			return e.download(ctx, c, rest[0], opts, e.stdout, true)
		}
		f, err := createOut(*out)
		if err != nil {
			return err
		}
		defer f.discard()
		if err := e.download(ctx, c, rest[0], opts, f, false); err != nil {
			return err
		}
		return f.commit()
	case "cancel":
		l, err := c.CancelList(ctx, rest[0])
		if err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(l)
		}
		fmt.Fprintf(e.stdout, "canceled %s after %d of %d addresses\n", l.ID, l.Verified, l.Unique)
	case "delete":
		if err := c.DeleteList(ctx, rest[0]); err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"id": rest[0], "deleted": true})
		}
		fmt.Fprintf(e.stdout, "deleted %s\n", rest[0])
	}
	return nil
}

// writeList shows one list for a person.
func writeList(w io.Writer, l client.List) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nname\t%s\nstate\t%s\n", l.ID, safetext.Escape(l.Name), l.State)
	fmt.Fprintf(tw, "file\t%s, %d rows, %d unique addresses in column %q\n", l.Format, l.Rows, l.Unique, l.EmailColumn)
	fmt.Fprintf(tw, "progress\t%d of %d (%.0f%%)", l.Verified, l.Unique, 100*l.Progress)
	if l.RatePerSecond != nil {
		fmt.Fprintf(tw, ", %.1f/s", *l.RatePerSecond)
	}
	if l.ETASeconds != nil {
		fmt.Fprintf(tw, ", ETA %s", time.Duration(*l.ETASeconds)*time.Second)
	}
	fmt.Fprintln(tw)
	for _, st := range []string{client.StatusDeliverable, client.StatusUndeliverable, client.StatusCatchAll, client.StatusUnknown, client.StatusInvalid} {
		fmt.Fprintf(tw, "%s\t%d\n", st, l.Counts.ByStatus[st])
	}
	if l.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", l.Error)
	}
	fmt.Fprintf(tw, "created\t%s\n", l.CreatedAt.Format(time.RFC3339))
	if l.ExpiresAt != nil {
		fmt.Fprintf(tw, "expires\t%s\n", l.ExpiresAt.Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "results\tmailvet lists results %s\n", l.ID)
	tw.Flush()
}
