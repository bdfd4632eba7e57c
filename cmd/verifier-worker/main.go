// Command verifier-worker runs layers 3–5 of the verification pipeline (MX, SMTP probe, signals)
// for work taken from NATS.
package main

import (
	"context"
	"encoding/json"
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
	if help, err := app.Parse(fs, args); help || err != nil {
		return err // -h printed the usage and is no failure; a bad flag is a usage error
	}
	switch cmd := fs.Arg(0); cmd {
	case "":
		return serve(ctx, getenv, stderr)
	case "check":
		return check(ctx, fs.Args()[1:], getenv, stdout, stderr)
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q", app.ErrUsage, cmd)
	}
}

// loadConfig reads the worker's configuration, after the command line was checked: help and
// usage errors never depend on the environment.
func loadConfig(getenv func(string) string) (config.Config, error) {
	cfg, err := config.Load(config.RoleVerifier, false, getenv)
	if err != nil {
		return cfg, fmt.Errorf("configuration:\n%w", err)
	}
	return cfg, nil
}

// serve takes verification work from NATS until ctx ends.
func serve(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	// The disposable files' lines are checked before the waits for Postgres and NATS, which
	// cannot fix them (docs/operations.md, "Start-up and shutdown").
	vc, err := verifyworker.EngineConfig(cfg)
	if err != nil {
		return err
	}
	log := app.Logger(stderr, "verifier-worker", cfg)
	in, err := app.Start(ctx, cfg, "verifier-worker", log)
	if err != nil {
		return err
	}
	defer in.Close()
	// Its observer is the metrics of docs/operations.md, "Health, readiness and metrics".
	engine, err := verify.NewObserved(vc, opsmetrics.NewVerify(in.Metrics))
	if err != nil {
		return err
	}
	defer engine.Close()
	// The fleet's session cap and MX and catch-all caches (docs/fleet.md).
	fl, err := fleet.New(ctx, in.JS, in.Layout, fleet.Options{Log: log, Metrics: in.Metrics})
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

const checkUsage = `usage: verifier-worker check ADDRESS
Run the whole pipeline (syntax, disposable, MX, SMTP probe, signals) on one address with this
environment's configuration and print the result as one JSON object. Needs neither Postgres nor
NATS. Put -- before an ADDRESS that starts with -.
`

// check runs the whole pipeline on one address with this environment's configuration and prints
// the result as one JSON object. Its arguments are parsed as a command line, so that -h prints
// its usage instead of being verified as an address.
func check(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verifier-worker check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), checkUsage) }
	if help, err := app.Parse(fs, args); help || err != nil {
		return err // -h printed the usage and is no failure; a bad flag is a usage error
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: check takes exactly one ADDRESS", app.ErrUsage)
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	vc, err := verifyworker.EngineConfig(cfg)
	if err != nil {
		return err
	}
	v, err := verify.New(vc)
	if err != nil {
		return err
	}
	defer v.Close()
	return json.NewEncoder(stdout).Encode(v.Verify(ctx, fs.Arg(0)))
}
