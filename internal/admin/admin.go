// Package admin implements the operator commands of `api admin …` (docs/operations.md, "bin/api admin"), the dashboard's
// bootstrap: create accounts, issue and revoke provisioning keys, set tiers and spend caps,
// confirm an account's email by hand. Each
// command prints exactly one JSON object on stdout, the result or an error object, so that
// scripts can parse stdout in both cases. Help (`api admin help`, `-h`) is text for people.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mailvet/mailvet/internal/account"
)

// ErrFailed is returned after a command has printed its JSON error object; the caller only has to
// exit non-zero.
var ErrFailed = errors.New("admin command failed")

// ErrUsage marks a failure that is a mistake on the command line (an unknown command, a bad flag
// or value). It comes wrapped together with ErrFailed; binaries exit 2 for it, as for their own
// usage errors.
var ErrUsage = errors.New("usage")

// ErrConfig marks an OpenStore failure that is the process's configuration (a bad environment
// variable), not the database: it prints as invalid_request, since retrying cannot fix it, and
// exits 1, since it is no mistake on the command line.
var ErrConfig = errors.New("configuration")

// OpenStore connects the store a command works on; done releases it. Help needs no store, so the
// caller's database is only opened for a command that runs.
type OpenStore func(ctx context.Context) (store *account.Store, done func(), err error)

// Main runs one command line (args without the leading "admin") the way `api admin` does: help
// goes to stdout; a command prints its JSON result or error object to stdout; a command-line
// mistake also prints the relevant usage to stderr. The error wraps ErrFailed on failure, and
// ErrUsage as well for a mistake on the command line.
func Main(ctx context.Context, args []string, open OpenStore, stdout, stderr io.Writer) error {
	cmd, err := Parse(args)
	if err == nil && cmd.Help() {
		return cmd.Run(ctx, nil, stdout)
	}
	if err == nil {
		err = runWith(ctx, cmd, open, stdout)
	} else {
		err = fail(stdout, err)
	}
	if errors.Is(err, ErrUsage) {
		fmt.Fprint(stderr, UsageOf(err))
	}
	return err
}

// runWith opens the store and runs cmd on it.
func runWith(ctx context.Context, cmd Command, open OpenStore, stdout io.Writer) error {
	store, done, err := open(ctx)
	if err != nil {
		code := "datastore_error"
		if errors.Is(err, ErrConfig) {
			code = "invalid_request"
		}
		WriteError(stdout, code, err)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	defer done()
	return cmd.Run(ctx, store, stdout)
}

// Run parses and executes one admin command (args without the leading "admin") on store and
// prints its JSON result or error object to stdout. It returns nil on success and an error
// wrapping ErrFailed otherwise.
func Run(ctx context.Context, store *account.Store, args []string, stdout io.Writer) error {
	cmd, err := Parse(args)
	if err != nil {
		return fail(stdout, err)
	}
	return cmd.Run(ctx, store, stdout)
}

// WriteError prints an error object for failures before a command could run (no database).
func WriteError(stdout io.Writer, code string, err error) {
	writeJSON(stdout, map[string]string{"error": code, "message": err.Error()})
}

// fail prints err as the JSON error object and returns the error for the caller's exit status.
func fail(stdout io.Writer, err error) error {
	code, msg := classify(err)
	writeJSON(stdout, map[string]string{"error": code, "message": msg})
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}

// classify turns an error into the error code of the JSON object; codes are those of the API's
// envelope (docs/errors.md).
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
		// datastore_error is the documented code of this case; the message says what to do.
		return "datastore_error", err.Error()
	case errors.Is(err, account.ErrCustomerTaken):
		return "invalid_request", err.Error()
	case errors.Is(err, account.ErrEmailUnconfirmed):
		// A dashboard sign-up not confirmed yet gets no keys, not even from an operator
		// (docs/operations.md, "bin/api admin").
		return "email_unconfirmed", "the account's email is not confirmed yet: its owner opens the link mailed to it (docs/dashboard.md)"
	case errors.Is(err, account.ErrDatastore):
		return "datastore_error", err.Error()
	}
	return "internal_error", err.Error()
}
