// Package cli is the `mailvet` command (cmd/mailvet): verification of addresses and of files as
// bulk lists, the lists themselves, keys and usage, the account's personal data and audit log, all through the public Go client
// (github.com/mailvet/mailvet/client), so the CLI can do nothing a client program could not.
// docs/clients.md, "CLI", is its manual.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/redact"
)

// Exit codes (docs/clients.md, "Exit codes"). The status says whether the command worked, never
// what the addresses turned out to be: an undeliverable address verified is a success.
const (
	ExitOK    = 0 // the command did what was asked
	ExitError = 1 // the API refused or failed, the network failed, or a file could not be read or written
	ExitUsage = 2 // a mistake on the command line or in the environment (no MAILVET_API_KEY)
)

const helpText = `mailvet — verify email addresses with the Mailvet API

Usage:
  mailvet verify [--json] ADDRESS...
        verify addresses; a table on a terminal, one JSON result a line (NDJSON) otherwise
  mailvet verify --file LIST.csv [--column NAME] [--out RESULTS.csv [--resume]]
        verify a file as a bulk list (--file - reads standard input): it is uploaded as it is,
        streamed, and the results CSV (standard output unless --out) has the input's columns
        followed by the result's; cells starting with = + - @ get an apostrophe (a spreadsheet
        would run them as formulas). --resume finishes an earlier run of the same file into the
        same --out (interrupted, canceled): only what it did not verify is verified and billed
  mailvet lists [list] [--limit N] [--cursor C] [--json]
                                          the account's bulk lists, newest first
  mailvet lists show ID [--json]          a list's state, counts and progress
  mailvet lists results ID [--format csv|ndjson] [--status S,...] [--out FILE] [--raw-formulas]
                                          download a list's rows with their results; CSV cells
                                          that start with = + - @ get an apostrophe unless
                                          --raw-formulas
  mailvet lists cancel ID                 stop a running list (what is not verified is not billed)
  mailvet lists delete ID                 delete a list's rows and results for good
  mailvet keys list [--json]              the account's standard keys, live and sandbox
  mailvet keys create [--label LABEL] [--sandbox]
                                          a new standard key, shown once (label mailvet-cli unless given);
                                          --sandbox: a sandbox key (sk_test_…, docs/sandbox.md)
  mailvet keys revoke ID                  revoke a standard key
  mailvet usage [--json]                  this month's usage and the last 30 days
  mailvet account show [--json]           the account: its id, tier, subscription, usage
  mailvet account export [--out FILE]     everything the account stores, as one JSON document
                                          (docs/personal-data.md); --out is written whole or not at all
  mailvet account delete --confirm ACCOUNT_ID [--json]
                                          delete the account and everything stored for it; it
                                          cannot be undone, and every key stops working. ACCOUNT_ID
                                          is the id account show prints; a paying account is
                                          refused (cancel the subscription first)
  mailvet history delete EMAIL [--json]   delete what the account stores of one address (results,
                                          finished jobs and deliveries, finished lists' rows) and
                                          print how many of each; takes a standard key
  mailvet audit [--limit N] [--cursor C] [--json]
                                          the account's audit log (sign-ins, passwords, keys,
                                          plan and spend cap changes, email confirmation,
                                          deletion), newest first
  mailvet version                         the version
  mailvet help                            this text
  mailvet COMMAND -h                      one command's usage and flags (also --help)

Environment:
  MAILVET_API_KEY   the API key: a standard key (sk_live_…, or sandbox sk_test_…) for verify, lists and
                    history delete; a provisioning key (sk_mgmt_…) for keys, usage, account and audit
  MAILVET_URL       the API's base URL (default http://localhost:8080)

A file is read as CSV with a header row; the API picks the address column (--column, else the
first header that looks like an email column, else the first column). A .ndjson or .jsonl file
is NDJSON. A file or standard input whose first line is a lone address (an @, no comma) is a
plain list, one address a line, and its output has the header "email". Progress (with rate and
ETA) is shown on standard error when it is a terminal; nothing is, when it is not. Interrupting
verify --file cancels its list.

Requests refused for the per-minute rate limit wait for the next window and are sent again.

Exit codes:
  0  success (whatever the verdicts: an undeliverable address is a result, not a failure)
  1  the API answered an error, the network failed, a file could not be read or written, or a
     list ended failed or canceled
  2  usage error: unknown command or flag, missing argument, MAILVET_API_KEY not set or not a
     key (a character that is not visible ASCII), MAILVET_URL not an http(s) URL
`

// errUsage marks mistakes on the command line; Run exits ExitUsage for them.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// helpRequest is a command's -h or --help: Run prints that command's usage on standard output
// and exits ExitOK, as `mailvet help` does for the whole tool.
type helpRequest struct {
	command string        // the first word of the command line: verify, keys, lists, usage, …
	flags   *flag.FlagSet // its flags, listed under the usage
}

func (h *helpRequest) Error() string { return "help requested" }

// commandUsage is the part of helpText's Usage section about command (its "mailvet command"
// lines and their continuation lines), so that a command's help and the tool's can never
// disagree.
func commandUsage(command string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(helpText, "\n") {
		switch {
		case line == "" || !strings.HasPrefix(line, "  "):
			in = false
		case strings.HasPrefix(line, "  mailvet "):
			in = strings.HasPrefix(line, "  mailvet "+command+" ")
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// writeHelp prints the usage of the command h asks about, then its flags, written with two
// dashes as the usage lines write them.
func writeHelp(w io.Writer, h *helpRequest) {
	fmt.Fprintf(w, "Usage:\n%s", commandUsage(h.command))
	var flags strings.Builder
	if h.flags != nil {
		h.flags.VisitAll(func(f *flag.Flag) {
			arg, text := flag.UnquoteUsage(f)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				text += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(&flags, "  --%-16s %s\n", strings.TrimSpace(f.Name+" "+arg), text)
		})
	}
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", flags.String())
	}
	fmt.Fprintln(w, "\nRun 'mailvet help' for the environment and the exit codes.")
}

// env is what a command runs with.
type env struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
}

// Run runs one mailvet command line and returns its exit code.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	err := e.dispatch(ctx, args)
	var help *helpRequest
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &help):
		writeHelp(stdout, help)
		return ExitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "mailvet: %s\nRun 'mailvet help' for usage.\n", strings.TrimPrefix(err.Error(), "usage: "))
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "mailvet: %s\n", describe(err))
		return ExitError
	}
}

func (e env) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, helpText)
		return usagef("no command")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, helpText)
		return nil
	case "version", "--version":
		return e.version(rest)
	case "verify":
		return e.verify(ctx, rest)
	case "keys":
		return e.keys(ctx, rest)
	case "usage":
		return e.usage(ctx, rest)
	case "lists":
		return e.lists(ctx, rest)
	case "account":
		return e.account(ctx, rest)
	case "history":
		return e.history(ctx, rest)
	case "audit":
		return e.audit(ctx, rest)
	default:
		return usagef("unknown command %q", cmd)
	}
}

// version prints the client's version; it takes no arguments but -h.
func (e env) version(args []string) error {
	rest, err := parse(flag.NewFlagSet("version", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("version: unexpected argument %q", rest[0])
	}
	fmt.Fprintf(e.stdout, "mailvet %s\n", client.Version)
	return nil
}

// client builds the API client from the environment.
func (e env) client() (*client.Client, error) {
	// The blanks and byte-order mark around a key read from a file ($(cat key.txt)) are no part
	// of it.
	key := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(e.getenv("MAILVET_API_KEY")), "\ufeff"))
	if key == "" {
		return nil, usagef("MAILVET_API_KEY is not set: export an API key (sk_live_… or sandbox sk_test_… to verify and for lists and history, sk_mgmt_… for keys, usage, account and audit)")
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }); i >= 0 {
		// Every key is visible ASCII. Anything else (two lines of a file, a pasted non-breaking
		// space) would fail as a network error that blames MAILVET_URL, or be refused as an
		// unknown key; the key itself is never shown.
		return nil, usagef("MAILVET_API_KEY has a character that is not visible ASCII at byte %d (a line break, a blank or a non-ASCII character): a key is sk_… in visible ASCII; check how it was set", i+1)
	}
	base := strings.TrimSpace(e.getenv("MAILVET_URL"))
	if base == "" {
		base = client.DefaultBaseURL
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := base // as written, so the mistake can be seen; with a password in it, masked
		if strings.Contains(base, "@") {
			shown = redact.URL(base)
		}
		return nil, usagef("MAILVET_URL %q is not an http(s) URL: give the scheme and host, like https://api.example.com", shown)
	}
	return client.New(key, client.WithBaseURL(base), client.WithRetryOnRateLimit(true),
		client.WithUserAgent("mailvet-cli/"+client.Version)), nil
}

// parse parses flags that may come before, between or after the positional arguments, and
// returns the positional ones. -h or --help anywhere before a "--" is a helpRequest for the
// command, whose first word is the flag set's name.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			return nil, &helpRequest{command: strings.Fields(fs.Name())[0], flags: fs}
		}
		if err != nil {
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// describe is an error for a person (docs/clients.md, "Errors"): what was being done (the list it
// was about, the file), then the API's message and, on a line of its own, what to do about it, in
// the API's words; the code, status and request id come last, for a support request. The
// client's own wrapping (which method, which slice of the input) is for programs and is left
// out: a person reads the message and the action.
func describe(err error) string {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		s := apiErr.Message
		// The context wrapped around the API's error: "list 01…: ".
		if outer, ok := strings.CutSuffix(err.Error(), apiErr.Error()); ok {
			s = ownContext(outer) + s
		}
		if apiErr.Action != "" {
			s += "\n  What to do: " + apiErr.Action
		}
		details := fmt.Sprintf("%s (HTTP %d)", apiErr.Code, apiErr.Status)
		if apiErr.RequestID != "" {
			details += ", request id " + apiErr.RequestID
		}
		if apiErr.Docs != "" {
			details += ", " + apiErr.Docs
		}
		return s + "\n  Details: " + details
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// A request that got no answer: where it went, and the network's reason.
		ctx := ""
		if outer, ok := strings.CutSuffix(err.Error(), ue.Error()); ok {
			ctx = ownContext(outer)
		}
		where := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			where = u.Scheme + "://" + u.Host
		}
		if ue.Timeout() {
			return fmt.Sprintf("%sthe API at %s did not answer in time: %v\n  What to do: check MAILVET_URL and that the API is running, then run the command again.", ctx, where, ue.Err)
		}
		return fmt.Sprintf("%scould not reach the API at %s: %v\n  What to do: check MAILVET_URL and that the API is running, then run the command again.", ctx, where, ue.Err)
	}
	return unprefixed(err.Error())
}

// ownContext is the part of outer (the text wrapped around an error) that the CLI wrote itself:
// everything before the first "mailvet: ", with which each of the client's own wrappers begins.
func ownContext(outer string) string {
	if i := strings.Index(outer, "mailvet: "); i >= 0 {
		outer = outer[:i]
	}
	return outer
}

// unprefixed drops the "mailvet: " each layer of the client starts its text with: the caller
// adds the one prefix a message needs.
func unprefixed(s string) string {
	return strings.ReplaceAll(strings.TrimPrefix(s, "mailvet: "), ": mailvet: ", ": ")
}

// isTerminal reports whether w is a terminal (a character device), where tables and progress
// are for a person; anything else gets machine-readable output and no progress.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
