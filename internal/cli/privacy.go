package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/safetext"
)

// The personal-data and audit commands (docs/clients.md, "Personal data and the audit log"):
// `account show|export|delete` and `audit` take the provisioning key, as the management API
// does; `history delete` takes a standard key, as DELETE /v1/email/history does
// (docs/personal-data.md).

// Which key a command needs, in the words its errors use.
const (
	needProvisioning = "a provisioning key (sk_mgmt_…)"
	needStandard     = "a standard key (sk_live_…, or sandbox sk_test_…)"
)

// keyFor puts what the command needs in front of a wrong_key_type refusal, so that the person
// reads which key to put in MAILVET_API_KEY before the API's general advice. Other errors pass
// as they are.
func keyFor(command, need string, err error) error {
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Code == client.CodeWrongKeyType {
		return fmt.Errorf("%s needs %s in MAILVET_API_KEY: %w", command, need, err)
	}
	return err
}

// account is `mailvet account show|export|delete`.
func (e env) account(ctx context.Context, args []string) error {
	sub, args, err := subcommand("account", "show, export or delete", args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(strings.TrimSpace("account "+sub), flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal (account show, account delete)")
	out := fs.String("out", "", "where to write the export (account export; default standard output)")
	confirm := fs.String("confirm", "", "the account's `ID`, as account show prints it: required to delete (account delete)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case sub == "":
		return usagef("account: give show, export or delete")
	case sub != "show" && sub != "export" && sub != "delete":
		return usagef("account: unknown subcommand %q (show, export, delete)", sub)
	case len(rest) != 0:
		return usagef("account %s: unexpected argument %q", sub, rest[0])
	case *out != "" && sub != "export":
		return usagef("account %s: --out goes with account export", sub)
	case *confirm != "" && sub != "delete":
		return usagef("account %s: --confirm goes with account delete", sub)
	case *asJSON && sub == "export":
		return usagef("account export: the export is JSON already; --json goes with account show and delete")
	case sub == "delete" && strings.TrimSpace(*confirm) == "":
		// A deletion cannot be undone: the id typed out is what says it is meant.
		return usagef("account delete: give --confirm ACCOUNT_ID, the id `mailvet account show` prints; deleting the account cannot be undone")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	human := !*asJSON && isTerminal(e.stdout)
	switch sub {
	case "show":
		a, err := c.Account(ctx)
		if err != nil {
			return keyFor("account show", needProvisioning, err)
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(a)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "id\t%s\ntier\t%s\n", a.AccountID, a.Tier)
		if a.SubscriptionStatus != "" {
			fmt.Fprintf(tw, "subscription\t%s\n", a.SubscriptionStatus)
		}
		fmt.Fprintf(tw, "usage this month\t%d\n", a.UsageThisMonth)
		return tw.Flush()
	case "export":
		return e.exportAccount(ctx, c, *out)
	case "delete":
		id := strings.TrimSpace(*confirm)
		if err := c.DeleteAccount(ctx, id); err != nil {
			return fmt.Errorf("account %s was not deleted: %w", id, keyFor("account delete", needProvisioning, err))
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"account_id": id, "deleted": true})
		}
		fmt.Fprintf(e.stdout, "deleted account %s and everything stored for it; its keys, this one included, no longer work\n", id)
	}
	return nil
}

// exportAccount copies the account's export (one JSON document, streamed) to outPath, or
// standard output. A download cut off is an error, and leaves an --out file as it was
// (outfile.go): a half export never passes for a whole one.
func (e env) exportAccount(ctx context.Context, c *client.Client, outPath string) error {
	var w io.Writer = e.stdout
	var f *outFile
	if outPath != "" {
		var err error
		if f, err = createOut(outPath); err != nil {
			return err
		}
		defer f.discard()
		w = f
	}
	body, err := c.ExportAccount(ctx)
	if err != nil {
		return keyFor("account export", needProvisioning, err)
	}
	defer body.Close()
	n, err := io.Copy(w, body)
	if err != nil {
		return fmt.Errorf("downloading the export: %w", err)
	}
	if f == nil {
		return nil
	}
	if err := f.commit(); err != nil {
		return err
	}
	if isTerminal(e.stderr) {
		fmt.Fprintf(e.stderr, "exported %d bytes to %s\n", n, outPath)
	}
	return nil
}

// history is `mailvet history delete EMAIL`.
func (e env) history(ctx context.Context, args []string) error {
	sub, args, err := subcommand("history", "delete EMAIL", args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(strings.TrimSpace("history "+sub), flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case sub == "":
		return usagef("history: give delete EMAIL")
	case sub != "delete":
		return usagef("history: unknown subcommand %q (delete)", sub)
	case len(rest) != 1:
		return usagef("history delete: give one email address")
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	d, err := c.DeleteHistory(ctx, rest[0])
	if err != nil {
		return keyFor("history delete", needStandard, err)
	}
	if *asJSON || !isTerminal(e.stdout) {
		return json.NewEncoder(e.stdout).Encode(d)
	}
	fmt.Fprintf(e.stdout, "deleted what the account stored of %s: %s, %s, %s, %s\n", safetext.Escape(d.Email),
		count(d.Deleted.Results, "result snapshot"), count(d.Deleted.Jobs, "job"),
		count(d.Deleted.Deliveries, "delivery"), count(d.Deleted.ListRows, "list row"))
	return nil
}

// count is "1 job", "2 jobs", "0 deliveries".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// audit is `mailvet audit [--limit N] [--cursor C]`: one page of the account's audit log.
func (e env) audit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal")
	limit := fs.Int("limit", 0, "events per page, 1 to 200 (the API's default is 50)")
	cursor := fs.String("cursor", "", "next_cursor of the previous page")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("audit: unexpected argument %q", rest[0])
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	p, err := c.AuditEvents(ctx, client.AuditQuery{Limit: *limit, Cursor: *cursor})
	if err != nil {
		return keyFor("audit", needProvisioning, err)
	}
	if *asJSON || !isTerminal(e.stdout) {
		return json.NewEncoder(e.stdout).Encode(p)
	}
	writeAudit(e.stdout, p, *limit)
	return nil
}

// writeAudit shows a page of events for a person, then the command for the next page (of the
// same size, limit; 0 for the API's default). Actor and detail are shown inertly: an email typed
// at sign-in is anyone's text.
func writeAudit(w io.Writer, p client.AuditPage, limit int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tOUTCOME\tACTOR\tCLIENT\tDETAIL")
	for _, ev := range p.Events {
		ip := "-"
		if ev.ClientIP != nil {
			ip = *ev.ClientIP
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ev.At.UTC().Format(time.RFC3339), ev.Kind, ev.Outcome,
			safetext.Escape(ev.Actor), ip, safetext.Escape(ev.Detail))
	}
	tw.Flush()
	switch {
	case p.NextCursor != "" && limit != 0:
		fmt.Fprintf(w, "more: mailvet audit --limit %d --cursor %s\n", limit, p.NextCursor)
	case p.NextCursor != "":
		fmt.Fprintf(w, "more: mailvet audit --cursor %s\n", p.NextCursor)
	}
}
