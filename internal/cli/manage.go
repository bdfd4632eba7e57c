package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/safetext"
)

// subcommand splits a command's arguments into its subcommand and the rest. A flag first leaves
// sub empty, so that `keys -h` is parsed as a request for help rather than taken for a
// subcommand; no argument at all is a usage error that says what to give.
func subcommand(command, give string, args []string) (sub string, rest []string, err error) {
	if len(args) == 0 {
		return "", nil, usagef("%s: give %s", command, give)
	}
	if strings.HasPrefix(args[0], "-") {
		return "", args, nil
	}
	return args[0], args[1:], nil
}

func (e env) keys(ctx context.Context, args []string) error {
	sub, args, err := subcommand("keys", "list, create or revoke", args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(strings.TrimSpace("keys "+sub), flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal")
	label := fs.String("label", "mailvet-cli", "the new key's label (keys create)")
	sandbox := fs.Bool("sandbox", false, "create a sandbox key, sk_test_…: answered from the magic addresses of docs/sandbox.md, never billed (keys create)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case sub == "":
		return usagef("keys: give list, create or revoke")
	case sub == "revoke" && len(rest) != 1:
		return usagef("keys revoke: give one key ID")
	case sub != "revoke" && len(rest) != 0:
		return usagef("keys %s: unexpected argument %q", sub, rest[0])
	case sub != "list" && sub != "create" && sub != "revoke":
		return usagef("keys: unknown subcommand %q (list, create, revoke)", sub)
	case *sandbox && sub != "create":
		return usagef("keys %s: --sandbox is for keys create", sub)
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	human := !*asJSON && isTerminal(e.stdout)
	switch sub {
	case "list":
		l, err := c.ListKeys(ctx)
		if err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(l)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tLABEL\tKEY\tMODE\tCREATED")
		for _, k := range l.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, safetext.Escape(k.Label), k.Prefix, k.Mode, k.CreatedAt.Format(time.RFC3339))
		}
		tw.Flush()
		fmt.Fprintf(e.stdout, "%d of %d keys\n", l.Count, l.Max)
	case "create":
		mode := client.ModeLive
		if *sandbox {
			mode = client.ModeSandbox
		}
		k, err := c.CreateKeyWithMode(ctx, *label, mode)
		if err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(k)
		}
		fmt.Fprintf(e.stdout, "%s\nid %s, label %q, mode %s\n%s\n", k.Key, k.ID, k.Label, k.Mode, k.Warning)
	case "revoke":
		if err := c.RevokeKey(ctx, rest[0]); err != nil {
			return err
		}
		if !human {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"id": rest[0], "revoked": true})
		}
		fmt.Fprintf(e.stdout, "revoked %s\n", rest[0])
	}
	return nil
}

func (e env) usage(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output even on a terminal")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("usage: unexpected argument %q", rest[0])
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	sum, err := c.UsageSummary(ctx)
	if err != nil {
		return err
	}
	days, err := c.Usage(ctx)
	if err != nil {
		return err
	}
	if *asJSON || !isTerminal(e.stdout) {
		return json.NewEncoder(e.stdout).Encode(map[string]any{"summary": sum, "days": days.Days})
	}
	fmt.Fprintf(e.stdout, "%s tier, %s to %s: %d calls used of %d included (%d left), %d overage, estimated cost €%.2f\n\n",
		sum.Tier, sum.Period.Start.Format(time.DateOnly), sum.Period.End.Format(time.DateOnly), sum.CallsUsed,
		sum.CallsIncluded, sum.CallsRemaining, sum.OverageCalls, sum.EstimatedCostEUR)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DAY\tCALLS\t")
	for _, d := range days.Days {
		fmt.Fprintf(tw, "%s\t%d\t\n", d.Date, d.Calls)
	}
	return tw.Flush()
}
