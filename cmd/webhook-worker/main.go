// Command webhook-worker signs and delivers the results of asynchronous verifications to the
// callers' HTTPS URLs, with retries and a delivery log.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/webhook"
)

func main() { app.Main("webhook-worker", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhook-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	concurrency := fs.Int("concurrency", 64, "attempts in flight at once (also bounds the consumer's MaxAckPending)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage:
  webhook-worker [-concurrency N]   deliver webhook callbacks taken from NATS
Configuration comes from the environment (docs/operations.md, "Configuration").
flags:
`)
		fs.PrintDefaults()
	}
	if help, err := app.Parse(fs, args); help || err != nil {
		return err // -h printed the usage and is no failure; a bad flag is a usage error
	}
	if fs.NArg() > 0 { // the worker has no subcommands: a stray word must not start it
		fs.Usage()
		return fmt.Errorf("%w: unexpected argument %q", app.ErrUsage, fs.Arg(0))
	}
	if *concurrency < 1 || *concurrency > 4096 {
		fs.Usage()
		return fmt.Errorf("%w: -concurrency %d is not from 1 to 4096", app.ErrUsage, *concurrency)
	}
	cfg, err := config.Load(config.RoleWebhook, false, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	// The worker opens the deliveries' sealed secrets: a key that died with the process would
	// leave them unreadable (docs/operations.md, "Secrets at rest").
	if err := cfg.RequireSecretsKey(); err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := app.Logger(stderr, "webhook-worker", cfg)
	in, err := app.Start(ctx, cfg, "webhook-worker", log)
	if err != nil {
		return err
	}
	defer in.Close()
	parts, err := webhook.Services(in.Pool, in.JS, in.Layout, webhookConfig(cfg), *concurrency, log, in.Metrics, in.Ready)
	if err != nil {
		return err
	}
	log.Info("webhook worker started", "ops", in.OpsAddr(), "concurrency", *concurrency)
	err = in.Run(ctx, parts...)
	log.Info("webhook worker stopped")
	return err
}

// webhookConfig is the delivery worker's part of the process configuration.
func webhookConfig(cfg config.Config) webhook.Config {
	return webhook.Config{AllowPrivate: cfg.WebhookAllowPrivate, DNSResolver: cfg.DNSResolver, Secrets: cfg.Secrets}
}
