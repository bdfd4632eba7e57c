// Command api is Mailvet's HTTP API. `api` serves; `api migrate` applies the database migrations
// and exits; `api -dev` runs the whole system in one process for local development.
package main

import (
	"context"
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

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.Bool("dev", false, "development mode: embedded NATS when NATS_URL is empty, in-process workers, auto-migrate")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: api [-dev]            serve the API\n       api migrate          apply database migrations and exit\n       api admin COMMAND    operator commands (api admin help)")
	}
	if err := fs.Parse(args); err != nil {
		return app.ErrUsage
	}
	cfg, err := config.Load(config.RoleAPI, *dev, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := app.NewLogger(stderr, "api")

	switch cmd := fs.Arg(0); cmd {
	case "":
		return serve(ctx, cfg, log, stdout)
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
		return runAdmin(ctx, cfg, fs.Args()[1:], stdout)
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q", app.ErrUsage, cmd)
	}
}

// runAdmin runs one `api admin` command against the database; the command prints its own JSON.
func runAdmin(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	pool, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		admin.WriteError(stdout, "datastore_error", err)
		return err
	}
	defer pool.Close()
	store := account.NewStore(pool)
	// The plan limits decide key maximums: make the table agree with this process's configuration.
	if err := store.SyncPlans(ctx, cfg.Plans, cfg.OverageEUR); err != nil {
		admin.WriteError(stdout, "datastore_error", err)
		return err
	}
	return admin.Run(ctx, store, args, stdout)
}
