package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/plan"
)

// options holds the flags of every command; each command registers the ones it takes. check
// fills in the parsed values.
type options struct {
	tier, email, customer, account, eur string
	none                                bool

	parsedTier plan.Tier
	spendCap   *float64 // nil: no cap
}

// command is one admin command. Its flags are declared once, in flags, so that parsing and the
// help text can never disagree; check validates them before any database is opened, so that a
// mistake on the command line is reported as such even when the database is missing.
type command struct {
	name     string
	synopsis string // the flags as one usage line shows them
	summary  string
	flags    func(*flag.FlagSet, *options)
	check    func(*options) error
	run      func(context.Context, *account.Store, options) (any, error)
}

// commands are the admin commands in the order the help lists them.
var commands = []*command{
	{"create-account", "--tier free|builder|scale [--email ADDRESS] [--stripe-customer cus_…]",
		"Create an account; prints its id.", createAccountFlags, checkCreateAccount, createAccount},
	{"create-provisioning-key", "(--account ID | --customer cus_…)",
		"Issue the account's provisioning key (at most one active per account); prints the key once.",
		createProvisioningKeyFlags, checkCreateProvisioningKey, createProvisioningKey},
	{"revoke-provisioning-key", "--account ID",
		"Revoke the account's active provisioning key; prints how many were revoked.",
		accountFlag, needAccount, revokeProvisioningKey},
	{"set-tier", "--account ID --tier free|builder|scale",
		"Change the account's plan.", setTierFlags, checkSetTier, setTier},
	{"set-spend-cap", "--account ID (--eur N | --none)",
		"Set or remove the hard cap on a paid account's overage per billing period.",
		setSpendCapFlags, checkSetSpendCap, setSpendCap},
	{"confirm-email", "--account ID",
		"Mark the account's email confirmed, as the link mailed at sign-up would (for an owner the mail does not reach).",
		accountFlag, needAccount, confirmEmail},
}

func accountFlag(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.account, "account", "", "the account's `ID`, as create-account prints it")
}

func tierFlag(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.tier, "tier", "", "the plan: `free|builder|scale`")
}

func createAccountFlags(fs *flag.FlagSet, o *options) {
	tierFlag(fs, o)
	fs.StringVar(&o.email, "email", "", "contact email `ADDRESS` (optional)")
	fs.StringVar(&o.customer, "stripe-customer", "", "Stripe customer id `cus_…` to bill (optional)")
}

func createProvisioningKeyFlags(fs *flag.FlagSet, o *options) {
	accountFlag(fs, o)
	fs.StringVar(&o.customer, "customer", "", "find the account by its Stripe customer id `cus_…` instead")
}

func setTierFlags(fs *flag.FlagSet, o *options) {
	accountFlag(fs, o)
	tierFlag(fs, o)
}

func setSpendCapFlags(fs *flag.FlagSet, o *options) {
	accountFlag(fs, o)
	fs.StringVar(&o.eur, "eur", "", "hard cap in EUR per billing period, `N` from 0 to 1000000000 with at most 2 decimals")
	fs.BoolVar(&o.none, "none", false, "remove the cap")
}

// usageError is a mistake on the command line; it prints as invalid_request, and usage is the
// help text that fits it (one command's, or all of them when the command is unknown).
type usageError struct {
	msg   string
	usage string
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return ErrUsage }

// usagef is a usageError about no command in particular: UsageOf shows every command.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// UsageOf is the help text for a command-line mistake err: the usage of the command it concerns,
// or the full usage.
func UsageOf(err error) string {
	var ue *usageError
	if errors.As(err, &ue) && ue.usage != "" {
		return ue.usage
	}
	return Usage()
}

// Command is a parsed command line, ready to run.
type Command struct {
	cmd  *command // nil when the line asked for help
	opts options
	help string
}

// Help reports whether the command line asked for help, which needs no store.
func (c Command) Help() bool { return c.cmd == nil }

// Run prints the help, or executes the command on store and prints its JSON result or error
// object. It returns nil on success and an error wrapping ErrFailed otherwise.
func (c Command) Run(ctx context.Context, store *account.Store, stdout io.Writer) error {
	if c.Help() {
		fmt.Fprint(stdout, c.help)
		return nil
	}
	out, err := c.cmd.run(ctx, store, c.opts)
	if err != nil {
		return fail(stdout, err)
	}
	writeJSON(stdout, out)
	return nil
}

// isHelp reports whether arg asks for help the way people ask for it.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// Parse reads a command line (without the leading "admin"): `help`, `-h` or `--help` (optionally
// followed by a command), a command's -h, or a command with its flags.
func Parse(args []string) (Command, error) {
	if len(args) == 0 {
		return Command{}, usagef("missing command; `api admin help` lists them")
	}
	if isHelp(args[0]) {
		return parseHelp(args[1:])
	}
	c := find(args[0])
	if c == nil {
		return Command{}, usagef("unknown command %q; `api admin help` lists the commands", args[0])
	}
	var opts options
	fs := c.flagSet(&opts)
	err := fs.Parse(args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		return Command{help: c.usage()}, nil
	case err != nil:
		return Command{}, &usageError{msg: fmt.Sprintf("%s: %v", c.name, err), usage: c.usage()}
	case fs.NArg() > 0:
		return Command{}, &usageError{msg: fmt.Sprintf("%s: unexpected argument %q", c.name, fs.Arg(0)), usage: c.usage()}
	}
	if err := c.check(&opts); err != nil {
		return Command{}, &usageError{msg: fmt.Sprintf("%s: %v", c.name, err), usage: c.usage()}
	}
	return Command{cmd: c, opts: opts}, nil
}

// parseHelp answers `help [COMMAND]`.
func parseHelp(args []string) (Command, error) {
	switch {
	case len(args) == 0:
		return Command{help: Usage()}, nil
	case len(args) > 1:
		return Command{}, usagef("help: give at most one command")
	}
	c := find(args[0])
	if c == nil {
		return Command{}, usagef("help: unknown command %q", args[0])
	}
	return Command{help: c.usage()}, nil
}

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (c *command) flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("admin "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // mistakes go into the JSON object; help is printed by Run
	c.flags(fs, o)
	return fs
}

// Usage is the help of `api admin`: every command with its flags.
func Usage() string {
	var b strings.Builder
	b.WriteString("usage: api admin COMMAND [flags]\n" +
		"       api admin help [COMMAND]\n\n" +
		"Operator commands. Each prints one JSON object on stdout: the result, or\n" +
		"{\"error\": …, \"message\": …} with a non-zero exit status (2 for a mistake on the command line).\n" +
		"The database is DATABASE_URL.\n\nCommands:\n")
	for _, c := range commands {
		b.WriteString("\n")
		c.describe(&b)
	}
	return b.String()
}

// usage is the help of one command.
func (c *command) usage() string {
	var b strings.Builder
	b.WriteString("usage: api admin ")
	c.describe(&b)
	return b.String()
}

// describe writes the synopsis, the summary and one line per flag.
func (c *command) describe(b *strings.Builder) {
	fmt.Fprintf(b, "%s %s\n    %s\n", c.name, c.synopsis, c.summary)
	c.flagSet(&options{}).VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f) // the `quoted` word of the usage names the value
		fmt.Fprintf(b, "    --%-28s %s\n", strings.TrimSpace(f.Name+" "+arg), text)
	})
}

// needAccount is the check of every command that takes --account.
func needAccount(o *options) error {
	if o.account == "" {
		return errors.New("--account is required")
	}
	return nil
}

func checkTier(o *options) error {
	t, err := plan.ParseTier(o.tier)
	if err != nil {
		return fmt.Errorf("--tier: %w", err)
	}
	o.parsedTier = t
	return nil
}

func checkCreateAccount(o *options) error {
	if err := checkTier(o); err != nil {
		return err
	}
	if o.email != "" && !strings.Contains(o.email, "@") {
		return fmt.Errorf("--email %q is not an email address", o.email)
	}
	if o.customer != "" && !strings.HasPrefix(o.customer, "cus_") {
		return fmt.Errorf("--stripe-customer %q is not a Stripe customer id (cus_…)", o.customer)
	}
	return nil
}

func checkCreateProvisioningKey(o *options) error {
	if (o.account == "") == (o.customer == "") {
		return errors.New("give exactly one of --account or --customer")
	}
	return nil
}

func checkSetTier(o *options) error {
	if err := needAccount(o); err != nil {
		return err
	}
	return checkTier(o)
}

func checkSetSpendCap(o *options) error {
	if err := needAccount(o); err != nil {
		return err
	}
	if (o.eur == "") == !o.none {
		return errors.New("give exactly one of --eur N or --none")
	}
	if o.none {
		return nil
	}
	v, err := parseEUR(o.eur)
	if err != nil {
		return err
	}
	o.spendCap = &v
	return nil
}

// eurAmount is what --eur accepts: digits with at most two decimals, the scale of the
// numeric(12,2) column. A third decimal would be rounded away silently by Postgres, and what
// ParseFloat also takes (NaN, Inf, exponents, hex, a sign) is no amount an operator means.
var eurAmount = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,2})?$`)

// parseEUR reads the value of --eur: an amount in EUR with at most two decimals, from 0 to
// maxSpendCapEUR.
func parseEUR(s string) (float64, error) {
	if !eurAmount.MatchString(s) {
		return 0, fmt.Errorf("--eur %q is not an amount in EUR like 250 or 49.90 (digits, at most 2 decimals)", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v > maxSpendCapEUR {
		return 0, fmt.Errorf("--eur %q is not an amount from 0 to 1000000000", s)
	}
	return v, nil
}

// maxSpendCapEUR is account.SetSpendCap's upper bound, checked here so that a larger amount is a
// mistake on the command line rather than a failure of the store.
const maxSpendCapEUR = 1e9

func createAccount(ctx context.Context, store *account.Store, o options) (any, error) {
	a, err := store.Create(ctx, account.NewAccount{Tier: o.parsedTier, Email: o.email, StripeCustomerID: o.customer})
	if err != nil {
		return nil, err
	}
	return map[string]any{"account_id": a.ID, "tier": a.Tier, "email": a.Email, "stripe_customer_id": a.StripeCustomerID}, nil
}

func createProvisioningKey(ctx context.Context, store *account.Store, o options) (any, error) {
	acct := o.account
	if o.customer != "" {
		a, err := store.ByCustomer(ctx, o.customer)
		if err != nil {
			return nil, err
		}
		acct = a.ID
	}
	var k account.CreatedKey
	err := store.InTx(ctx, func(tx pgx.Tx, store *account.Store) error {
		var err error
		if k, err = store.CreateProvisioningKey(ctx, acct); err != nil {
			return err
		}
		return record(ctx, tx, acct, audit.KeyCreated, "provisioning key "+k.Prefix+" (provisioning)")
	})
	if errors.Is(err, account.ErrProvisioningKeyExists) {
		return nil, provisioningKeyExists(acct)
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"id": k.ID, "key": k.Raw, "account_id": acct, "prefix": k.Prefix,
		"created_at": k.CreatedAt.UTC().Format(time.RFC3339),
		"warning":    "Store this key securely now: it is shown only once and cannot be retrieved later."}, nil
}

// provisioningKeyExists is account.ErrProvisioningKeyExists with a message that says what
// happened and what to do: only the key's hash is stored, so the existing key cannot be shown
// again; its holder keeps using it, or it is revoked and replaced.
func provisioningKeyExists(acct string) error { return &keyExistsError{account: acct} }

type keyExistsError struct{ account string }

func (e *keyExistsError) Error() string {
	return fmt.Sprintf("account %s already has an active provisioning key (at most one per account): "+
		"revoke it first with `api admin revoke-provisioning-key --account %s` and create a new one, or keep using the existing key",
		e.account, e.account)
}

func (e *keyExistsError) Unwrap() error { return account.ErrProvisioningKeyExists }

func revokeProvisioningKey(ctx context.Context, store *account.Store, o options) (any, error) {
	var n int
	err := store.InTx(ctx, func(tx pgx.Tx, store *account.Store) error {
		prov, err := store.ProvisioningKey(ctx, o.account)
		if err != nil {
			return err
		}
		if n, err = store.RevokeProvisioningKey(ctx, o.account); err != nil || n == 0 || prov == nil {
			return err
		}
		return record(ctx, tx, o.account, audit.KeyRevoked, "provisioning key "+prov.Prefix+" (provisioning)")
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"account_id": o.account, "revoked": n}, nil
}

func setTier(ctx context.Context, store *account.Store, o options) (any, error) {
	err := store.InTx(ctx, func(tx pgx.Tx, store *account.Store) error {
		a, err := store.Get(ctx, o.account)
		if err != nil {
			return err
		}
		if err := store.SetTier(ctx, o.account, o.parsedTier); err != nil || a.Tier == o.parsedTier {
			return err
		}
		return record(ctx, tx, o.account, audit.PlanChanged, fmt.Sprintf("plan %s → %s", a.Tier, o.parsedTier))
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"account_id": o.account, "tier": o.parsedTier}, nil
}

// setSpendCap prints the cap as read back from the account, so that the output is what admission
// will use, never merely what was asked for.
func setSpendCap(ctx context.Context, store *account.Store, o options) (any, error) {
	detail := "spend cap removed"
	if o.spendCap != nil {
		detail = fmt.Sprintf("spend cap set to €%.2f", *o.spendCap)
	}
	err := store.InTx(ctx, func(tx pgx.Tx, store *account.Store) error {
		if err := store.SetSpendCap(ctx, o.account, o.spendCap); err != nil {
			return err
		}
		return record(ctx, tx, o.account, audit.SpendCapChanged, detail)
	})
	if err != nil {
		return nil, err
	}
	a, err := store.Get(ctx, o.account)
	if err != nil {
		return nil, err
	}
	return map[string]any{"account_id": a.ID, "hard_cap_eur": a.HardCapEUR}, nil
}

// confirmEmail confirms a dashboard sign-up's email by hand (docs/operations.md, "bin/api admin"):
// the operator has made sure, some other way, that the account's owner holds the email. An
// account already confirmed (every account create-account makes is) is left as it is, says so
// with already_confirmed, and records nothing, as the other commands that change nothing do.
// The mailed links still outstanding are left to expire: one opened later confirms nothing new.
func confirmEmail(ctx context.Context, store *account.Store, o options) (any, error) {
	var a account.Account
	changed := false
	err := store.InTx(ctx, func(tx pgx.Tx, store *account.Store) error {
		var err error
		if changed, err = store.ConfirmEmail(ctx, o.account); err != nil {
			return err
		}
		if a, err = store.Get(ctx, o.account); err != nil || !changed {
			return err
		}
		// The detail names no email: the event is about the account, whose email it shows anyway.
		return record(ctx, tx, o.account, audit.EmailConfirmed, "email confirmed by an operator")
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"account_id": a.ID, "email": a.Email, "email_confirmed": true, "already_confirmed": !changed}, nil
}

// Operator is the actor of the admin commands' audit events: a person with the database's
// credentials, whom Mailvet knows by no other name.
const Operator = "operator (api admin)"

// record writes the audit event of an admin command's change with the change's transaction
// (docs/security.md, "When an audit write fails"): a failed write fails the command, a datastore
// error, and the change is not made.
func record(ctx context.Context, tx pgx.Tx, accountID string, kind audit.Kind, detail string) error {
	err := audit.Record(ctx, tx, audit.Event{AccountID: accountID, ActorType: audit.ActorSystem, Actor: Operator,
		Kind: kind, Outcome: audit.Success, Detail: detail})
	if err != nil {
		return fmt.Errorf("%w: %w", account.ErrDatastore, err)
	}
	return nil
}
