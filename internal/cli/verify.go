package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/safetext"
)

// maxAddressBytes is the API's bound on one address (docs/api.md, "Limits").
const maxAddressBytes = 1024

func (e env) verify(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	file := fs.String("file", "", "list to verify as a bulk list (- for standard input)")
	column := fs.String("column", "", "the CSV column with the addresses")
	out := fs.String("out", "", "where to write the CSV results (default standard output)")
	asJSON := fs.Bool("json", false, "NDJSON output even on a terminal")
	resume := fs.Bool("resume", false, "with --file and --out: finish an earlier run of the same file, verifying (and billing) only what it did not")
	addresses, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *file == "" && len(addresses) == 0:
		return usagef("verify: give addresses or --file LIST.csv")
	case *file != "" && len(addresses) > 0:
		return usagef("verify: give addresses or --file, not both")
	case *file == "" && (*column != "" || *out != "" || *resume):
		return usagef("verify: --column, --out and --resume go with --file")
	case *file != "" && *asJSON:
		// The output is the results CSV: --json would promise what a JSON reader then fails on.
		return usagef("verify: --json goes with addresses; --file writes the results CSV (mailvet lists results ID --format ndjson downloads them as NDJSON)")
	case *resume && (*out == "" || *file == "-"):
		return usagef("verify: --resume needs --out and a file (not -): the earlier run is remembered beside --out")
	}
	// The API would refuse these too, but only with the batch that carries them, after the ones
	// before it were verified and charged.
	for i, a := range addresses {
		switch {
		case strings.TrimSpace(a) == "":
			return usagef("verify: address %d of %d is empty", i+1, len(addresses))
		case !utf8.ValidString(a):
			return usagef("verify: address %d of %d is not valid UTF-8", i+1, len(addresses))
		case len(a) > maxAddressBytes:
			return usagef("verify: address %d of %d is longer than %d bytes", i+1, len(addresses), maxAddressBytes)
		}
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	if *file != "" {
		return e.verifyFile(ctx, c, *file, *column, *out, *resume)
	}
	var opts client.BatchOptions
	if isTerminal(e.stderr) {
		// A person waits at the plan's pace: say how far it is and when a rate-limit wait ends
		// (docs/clients.md, "CLI"); the hint to use --file comes once, with a long wait.
		opts.Progress = func(p client.BatchProgress) { e.batchProgress(p) }
	}
	results, err := c.VerifyBatchWith(ctx, addresses, opts)
	if opts.Progress != nil {
		fmt.Fprint(e.stderr, "\r\033[K")
	}
	if err != nil && len(results) > 0 {
		// The results before the failed request are printed (and charged): say so, in the
		// input's numbering rather than the client's slice of it.
		err = fmt.Errorf("%d of %d addresses were verified (their results are printed) before: %w", len(results), len(addresses), err)
	}
	if !*asJSON && isTerminal(e.stdout) {
		writeResultTable(e.stdout, results)
	} else {
		enc := json.NewEncoder(e.stdout)
		for _, r := range results {
			if werr := enc.Encode(r); werr != nil {
				return werr
			}
		}
	}
	return err
}

func writeResultTable(w io.Writer, results []client.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EMAIL\tSTATUS\tREASON\tCONFIDENCE\tSUGGESTION\tSMTP REPLY")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\n", r.Email, r.Status, r.Reason, r.Confidence, r.Suggestion, replyCell(r.SMTPReply))
	}
	tw.Flush()
}

// replyCell is the table's SMTP REPLY cell: the reply as the server wrote it (code, enhanced code,
// text), empty when no server was asked. The API sends the text free of control characters; it
// is escaped all the same, as every name in a table is, so that no answer can break the table.
func replyCell(rep *client.SMTPReply) string {
	if rep == nil {
		return ""
	}
	cell := strconv.Itoa(rep.Code)
	if rep.EnhancedCode != "" {
		cell += " " + rep.EnhancedCode
	}
	if rep.Text != "" {
		cell += " " + safetext.Escape(rep.Text)
	}
	return cell
}

// batchProgress draws `verify ADDRESS…`'s progress on a terminal's standard error: one line,
// redrawn; a long wait for the rate limit also prints the hint to use a bulk list (--file).
func (e env) batchProgress(p client.BatchProgress) {
	line := fmt.Sprintf("verified %d of %d", p.Done, p.Total)
	if !p.WaitingUntil.IsZero() {
		line += fmt.Sprintf("; rate limit: waiting until %s", p.WaitingUntil.Local().Format("15:04:05"))
	}
	if p.Hint != "" {
		fmt.Fprintf(e.stderr, "\r\033[K%s\n  (mailvet verify --file LIST is a bulk list: not held to the per-minute limit)\n",
			strings.TrimPrefix(p.Hint, "mailvet: "))
	}
	fmt.Fprint(e.stderr, "\r\033[K"+line)
}
