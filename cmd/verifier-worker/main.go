// Command verifier-worker runs layers 3–5 of the verification pipeline (MX, SMTP probe, signals)
// for work taken from NATS.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/opsmetrics"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

func main() { app.Main("verifier-worker", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verifier-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage:
  verifier-worker                 serve verification work from NATS
  verifier-worker check ADDRESS   run the whole pipeline on one address and print the result JSON
Configuration comes from the environment (docs/operations.md, "Configuration").
`)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h asked for the usage, which is printed: no failure
			return nil
		}
		return app.ErrUsage
	}
	cfg, err := config.Load(config.RoleVerifier, false, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if fs.Arg(0) == "check" {
		return check(ctx, cfg, fs.Args()[1:], stdout)
	}
	log := app.NewLogger(stderr, "verifier-worker")
	in, err := app.Start(ctx, cfg, "verifier-worker", log)
	if err != nil {
		return err
	}
	defer in.Close()
	engine, err := verify.NewObserved(cfg, opsmetrics.NewVerify(in.Metrics)) // docs/operations.md, "Metrics"
	if err != nil {
		return err
	}
	defer engine.Close()
	// The fleet's session cap and MX and catch-all caches (docs/fleet.md).
	fl, err := fleet.New(ctx, in.JS, in.Layout, fleet.Options{Log: log})
	if err != nil {
		return err
	}
	// The sessions end (QUIT, connection closed) before their fleet slots are given up, so
	// that a waiting worker's session never overlaps one of ours (docs/fleet.md).
	defer func() { engine.Close(); fl.Close() }()
	engine.Join(verify.Fleet{Slots: fl.Slots, MX: fl.MX, CatchAll: fl.CatchAll})
	log.Info("verifier worker started", "ops", in.OpsAddr())
	err = in.Run(ctx, verifyworker.Services(verifyworker.Deps{Pool: in.Pool, NATS: in.NATS, JS: in.JS, Layout: in.Layout, Pipe: engine, Log: log,
		Metrics: in.Metrics, Ready: in.Ready}.WithConfig(cfg))...)
	log.Info("verifier worker stopped")
	return err
}

// check runs the whole pipeline on one address with this environment's configuration and prints
// the result as one JSON object.
func check(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: check takes exactly one ADDRESS", app.ErrUsage)
	}
	v, err := verify.New(cfg)
	if err != nil {
		return err
	}
	defer v.Close()
	return json.NewEncoder(stdout).Encode(v.Verify(ctx, args[0]))
}
