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

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/admin"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage, which is printed: no failure
			return nil
		}
		return app.ErrUsage
	}
	cfg, err := config.Load(config.RoleAPI, *dev || *demo, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := app.NewLogger(stderr, "api")

	switch cmd := fs.Arg(0); cmd {
	case "":
		if *demo {
			return serveDemo(ctx, cfg, log, stdout)
		}
		return serve(ctx, cfg, log, stdout, nil)
	case "migrate":
		if err := database.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
		n, err := database.Migrate(ctx, cfg.DatabaseURL, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "{\"applied\": %d}\n", n)
		return nil
	case "admin":
		return runAdmin(ctx, cfg, fs.Args()[1:], stdout, stderr)
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q", app.ErrUsage, cmd)
	}
}

// runAdmin runs one `api admin` command line; the command prints its own JSON, help its text.
// A mistake on the command line exits 2, like the binary's own usage errors.
func runAdmin(ctx context.Context, cfg config.Config, args []string, stdout, stderr io.Writer) error {
	err := admin.Main(ctx, args, func(ctx context.Context) (*account.Store, func(), error) {
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
	return account.NewStore(pool), pool.Close, nil
}
