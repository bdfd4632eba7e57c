// Command api is Mailvet's HTTP API. `api` serves; `api migrate` applies the database migrations
// and exits; `api -dev` runs the whole system in one process for local development, and
// `api -dev -demo` does so in a simulated mail world that needs no internet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/admin"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/sealed"
)

func main() { app.Main("api", run) }

const usageText = `usage: api [-dev [-demo]]     serve the API
       api migrate          apply database migrations and exit
       api admin COMMAND    operator commands (api admin help lists them)

flags:`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.Bool("dev", false, "development mode: embedded NATS when NATS_URL is empty, in-process workers, auto-migrate, listeners on 127.0.0.1")
	demo := fs.Bool("demo", false, "with -dev (implied): verify against the built-in mail simulator, whose demo addresses show every outcome offline")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if help, err := app.Parse(fs, args); help || err != nil {
		return err // -h printed the usage and is no failure; a bad flag is a usage error
	}
	// The configuration is loaded by the command that needs it, after its own command line is
	// checked: help and usage errors must not depend on the environment.
	load := func() (config.Config, error) { return config.Load(config.RoleAPI, *dev || *demo, getenv) }

	switch cmd := fs.Arg(0); cmd {
	case "":
		cfg, err := load()
		if err == nil {
			err = cfg.CheckSignupMail()
		}
		if err != nil {
			return configError(err)
		}
		if cfg, err = secretsKey(cfg); err != nil {
			return err
		}
		log := app.Logger(stderr, "api", cfg)
		if *demo {
			return serveDemo(ctx, cfg, log, stdout)
		}
		return serve(ctx, cfg, log, stdout, nil)
	case "migrate":
		return migrate(ctx, fs.Args()[1:], load, stdout, stderr)
	case "admin":
		return runAdmin(ctx, fs.Args()[1:], load, stdout, stderr)
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q", app.ErrUsage, cmd)
	}
}

// secretsKey makes sure the API seals webhook secrets under a key that outlives the process
// (docs/operations.md, "Secrets at rest"): outside dev mode MAILVET_SECRETS_KEY must be set; dev
// mode without it uses the key kept under .data/ (git-ignored), made on first use.
func secretsKey(cfg config.Config) (config.Config, error) {
	if err := cfg.RequireSecretsKey(); err != nil {
		return cfg, configError(err)
	}
	if cfg.SecretsKeySet {
		return cfg, nil
	}
	b, err := sealed.DevKey(app.DevDataDir)
	if err != nil {
		return cfg, fmt.Errorf("dev secrets key: %w", err)
	}
	if cfg.Secrets, err = sealed.New(b, nil); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// configError is a bad configuration as the binary reports it: every bad variable, one a line.
func configError(err error) error { return fmt.Errorf("configuration:\n%w", err) }

const migrateUsage = `usage: api migrate
Create the database of DATABASE_URL if it is missing, apply every pending migration under an
advisory lock, print {"applied": N} and exit. Running it again is a no-op.
`

// migrate is `api migrate`. It takes no arguments: a stray one (a mistyped flag after the
// command, say) is a usage error before anything is touched, and -h only prints the usage.
func migrate(ctx context.Context, args []string, load func() (config.Config, error), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), migrateUsage) }
	if help, err := app.Parse(fs, args); help || err != nil {
		return err // -h printed the usage and is no failure; a bad flag is a usage error
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: migrate takes no arguments, got %q", app.ErrUsage, fs.Arg(0))
	}
	cfg, err := load()
	if err != nil {
		return configError(err)
	}
	if err := database.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	n, err := database.Migrate(ctx, cfg.DatabaseURL, app.Logger(stderr, "api", cfg))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "{\"applied\": %d}\n", n)
	return nil
}

// runAdmin runs one `api admin` command line; the command prints its own JSON, help its text.
// A mistake on the command line exits 2, like the binary's own usage errors. The configuration
// is loaded only for a command that runs, so help needs none, and a bad one is reported in the
// command's JSON error object (admin.ErrConfig) like any other failure.
func runAdmin(ctx context.Context, args []string, load func() (config.Config, error), stdout, stderr io.Writer) error {
	err := admin.Main(ctx, args, func(ctx context.Context) (*account.Store, func(), error) {
		cfg, err := load()
		if err != nil {
			// One line in the JSON message: every bad variable, separated by "; ".
			return nil, nil, fmt.Errorf("%w: %s", admin.ErrConfig, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		return openAdminStore(ctx, cfg)
	}, stdout, stderr)
	if errors.Is(err, admin.ErrUsage) {
		return fmt.Errorf("%w: %w", app.ErrUsage, err)
	}
	return err
}

// openAdminStore opens the database for an admin command; done closes it.
func openAdminStore(ctx context.Context, cfg config.Config) (store *account.Store, done func(), err error) {
	pool, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	// A database not migrated (yet) for this build gets the advice the servers log while they
	// wait for it (docs/operations.md, "Start-up and shutdown"), not a missing table or column.
	need, err := database.SchemaVersion()
	if err == nil {
		var have int64
		if have, err = database.AppliedVersion(ctx, pool); err == nil && have < need {
			err = fmt.Errorf("the database schema is at migration %d, this build needs %d: run `bin/api migrate`", have, need)
		}
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return account.NewStore(pool), pool.Close, nil
}
