// Package admin implements the operator commands of `api admin …` (DESIGN §3.1), the dashboard's
// bootstrap: create accounts, issue and revoke provisioning keys, set tiers and spend caps. Each
// command prints exactly one JSON object on stdout, the result or an error object, so that
// scripts can parse stdout in both cases.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/config"
)

// ErrFailed is returned after a command has printed its JSON error object; the caller only has to
// exit non-zero.
var ErrFailed = errors.New("admin command failed")

// Usage lists the commands.
const Usage = `usage: api admin COMMAND [flags]
  create-account --tier free|builder|scale [--email E] [--stripe-customer cus_…]
  create-provisioning-key (--account ID | --customer cus_…)
  revoke-provisioning-key --account ID
  set-tier --account ID --tier free|builder|scale
  set-spend-cap --account ID (--eur N | --none)`

// usageError is a bad command line; it prints as invalid_request.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// Run executes one admin command (args without the leading "admin") and prints its JSON result or
// error object to stdout. It returns nil on success and an error wrapping ErrFailed otherwise.
func Run(ctx context.Context, store *account.Store, args []string, stdout io.Writer) error {
	out, err := run(ctx, store, args)
	if err != nil {
		code, msg := classify(err)
		writeJSON(stdout, map[string]string{"error": code, "message": msg})
		return fmt.Errorf("%w: %s", ErrFailed, msg)
	}
	writeJSON(stdout, out)
	return nil
}

// WriteError prints an error object for failures before a command could run (no database).
func WriteError(stdout io.Writer, code string, err error) {
	writeJSON(stdout, map[string]string{"error": code, "message": err.Error()})
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}

// classify turns an error into the error code of the JSON object; codes are those of the API's
// envelope (spec §7, DESIGN §3.3).
func classify(err error) (code, msg string) {
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return "invalid_request", ue.msg
	case errors.Is(err, account.ErrCustomerNotFound):
		return "customer_not_found", err.Error()
	case errors.Is(err, account.ErrNotFound):
		return "not_found", err.Error()
	case errors.Is(err, account.ErrProvisioningKeyExists):
		return "datastore_error", err.Error()
	case errors.Is(err, account.ErrCustomerTaken):
		return "invalid_request", err.Error()
	case errors.Is(err, account.ErrDatastore):
		return "datastore_error", err.Error()
	}
	return "internal_error", err.Error()
}

func run(ctx context.Context, store *account.Store, args []string) (any, error) {
	if len(args) == 0 {
		return nil, usagef("missing command\n%s", Usage)
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("admin "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors go into the JSON object instead
	var (
		tier, email, customer, acct, eur string
		none                             bool
	)
	switch cmd {
	case "create-account":
		fs.StringVar(&tier, "tier", "", "tier")
		fs.StringVar(&email, "email", "", "contact email")
		fs.StringVar(&customer, "stripe-customer", "", "Stripe customer id")
	case "create-provisioning-key":
		fs.StringVar(&acct, "account", "", "account id")
		fs.StringVar(&customer, "customer", "", "Stripe customer id")
	case "revoke-provisioning-key":
		fs.StringVar(&acct, "account", "", "account id")
	case "set-tier":
		fs.StringVar(&acct, "account", "", "account id")
		fs.StringVar(&tier, "tier", "", "tier")
	case "set-spend-cap":
		fs.StringVar(&acct, "account", "", "account id")
		fs.StringVar(&eur, "eur", "", "hard cap in EUR per billing period")
		fs.BoolVar(&none, "none", false, "remove the cap")
	default:
		return nil, usagef("unknown command %q\n%s", cmd, Usage)
	}
	if err := fs.Parse(rest); err != nil {
		return nil, usagef("%s: %v", cmd, err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	needAccount := func() error {
		if acct == "" {
			return usagef("%s: --account is required", cmd)
		}
		return nil
	}

	switch cmd {
	case "create-account":
		t, err := config.ParseTier(tier)
		if err != nil {
			return nil, usagef("--tier: %v", err)
		}
		if email != "" && !strings.Contains(email, "@") {
			return nil, usagef("--email %q is not an email address", email)
		}
		if customer != "" && !strings.HasPrefix(customer, "cus_") {
			return nil, usagef("--stripe-customer %q is not a Stripe customer id (cus_…)", customer)
		}
		a, err := store.Create(ctx, account.NewAccount{Tier: t, Email: email, StripeCustomerID: customer})
		if err != nil {
			return nil, err
		}
		return map[string]any{"account_id": a.ID, "tier": a.Tier, "email": a.Email, "stripe_customer_id": a.StripeCustomerID}, nil

	case "create-provisioning-key":
		if (acct == "") == (customer == "") {
			return nil, usagef("%s: give exactly one of --account or --customer", cmd)
		}
		if customer != "" {
			a, err := store.ByCustomer(ctx, customer)
			if err != nil {
				return nil, err
			}
			acct = a.ID
		}
		k, err := store.CreateProvisioningKey(ctx, acct)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": k.ID, "key": k.Raw, "account_id": acct, "prefix": k.Prefix,
			"created_at": k.CreatedAt.UTC().Format(time.RFC3339),
			"warning":    "Store this key securely now: it is shown only once and cannot be retrieved later."}, nil

	case "revoke-provisioning-key":
		if err := needAccount(); err != nil {
			return nil, err
		}
		n, err := store.RevokeProvisioningKey(ctx, acct)
		if err != nil {
			return nil, err
		}
		return map[string]any{"account_id": acct, "revoked": n}, nil

	case "set-tier":
		if err := needAccount(); err != nil {
			return nil, err
		}
		t, err := config.ParseTier(tier)
		if err != nil {
			return nil, usagef("--tier: %v", err)
		}
		if err := store.SetTier(ctx, acct, t); err != nil {
			return nil, err
		}
		return map[string]any{"account_id": acct, "tier": t}, nil

	default: // set-spend-cap
		if err := needAccount(); err != nil {
			return nil, err
		}
		if (eur == "") == !none {
			return nil, usagef("%s: give exactly one of --eur N or --none", cmd)
		}
		var cap *float64
		if !none {
			v, err := strconv.ParseFloat(eur, 64)
			if err != nil || v < 0 || v > 1e9 {
				return nil, usagef("--eur %q is not an amount from 0 to 1000000000", eur)
			}
			cap = &v
		}
		if err := store.SetSpendCap(ctx, acct, cap); err != nil {
			return nil, err
		}
		return map[string]any{"account_id": acct, "hard_cap_eur": cap}, nil
	}
}
