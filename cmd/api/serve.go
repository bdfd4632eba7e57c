package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/admin"
	"github.com/mailvet/mailvet/internal/api"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/dashboard"
	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/mailer"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/mailsink"
	"github.com/mailvet/mailvet/internal/opsmetrics"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
	"github.com/mailvet/mailvet/internal/webhook"
)

// serve runs the API (and, in dev mode, the workers in-process) until ctx ends, then drains.
// A demo world, when not nil, is what the verification engine probes instead of the internet.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, demo *mailsim.World) error {
	// What waiting cannot fix fails before the waits for Postgres and NATS (docs/operations.md,
	// "Start-up and shutdown"): the disposable files' lines, and a port that cannot be bound.
	// The API runs only the local layers itself (syntax, disposable, signals); the engine's network
	// layers stay idle here unless dev mode runs the verifier in-process.
	vc, err := verifyworker.EngineConfig(cfg)
	if err != nil {
		return err
	}
	if err := app.CheckListen(cfg.HTTPAddr); err != nil {
		return fmt.Errorf("MAILVET_HTTP_ADDR: %w", err)
	}
	in, err := app.Start(ctx, cfg, "api", log)
	if err != nil {
		return err
	}
	defer in.Close()

	store := account.NewStore(in.Pool)
	// The engine's observer counts the results the API decides itself and times their layers
	// (docs/operations.md, "Health, readiness and metrics").
	engine, err := verify.NewObserved(engineConfig(vc, demo), opsmetrics.NewVerify(in.Metrics))
	if err != nil {
		return err
	}
	defer engine.Close()
	relay, closeRelay, err := mailRelay(cfg, log)
	if err != nil {
		return err
	}
	defer closeRelay()
	srv := api.New(api.Deps{Config: cfg, Log: log, Pool: in.Pool, NATS: in.NATS, JS: in.JS, Layout: in.Layout,
		Ready: in.Ready, Metrics: in.Metrics, Local: engine, Mailer: relay})
	httpSrv, err := app.Listen(cfg.HTTPAddr, srv.Handler())
	if err != nil {
		return fmt.Errorf("MAILVET_HTTP_ADDR: %w", err)
	}
	// The start line names where people go (docs/operations.md, "Logs"): the dashboard, the
	// API reference and the error reference, at the public URL customers are given.
	log.Info("api listening", "addr", httpSrv.Addr(), "ops", in.OpsAddr(), "dev", cfg.Dev,
		"dashboard", cfg.PublicURL+"/dashboard/", "openapi", cfg.PublicURL+"/openapi.json", "errors", cfg.PublicURL+"/docs/errors")
	if cfg.Dev {
		if err := devBanner(ctx, store, cfg, httpSrv.Addr(), demo != nil, stdout); err != nil {
			return err
		}
	}
	parts := []func(context.Context) error{
		func(ctx context.Context) error {
			defer srv.Close() // the usage rows of the last requests, once no handler can add more
			// Lists in flight end properly (a stream with its error line) within the grace.
			stop := context.AfterFunc(ctx, srv.BeginShutdown)
			defer stop()
			return httpSrv.Serve(ctx, app.ShutdownGrace, log)
		},
		func(ctx context.Context) error { return pruneRateWindows(ctx, in, log) },
		func(ctx context.Context) error { return expireHolds(ctx, in, log) },
		func(ctx context.Context) error { return sweepIdempotencyKeys(ctx, in, log) },
		func(ctx context.Context) error { return sweepDashboard(ctx, in, log) },
		// Every replica purges the audit log; Purge's SKIP LOCKED shares the rows (docs/security.md,
		// "Audit log").
		func(ctx context.Context) error {
			return audit.RunRetention(ctx, in.Pool, audit.Retention{Keep: cfg.AuditRetention, Log: log})
		},
	}
	if cfg.Dev {
		// The whole system in one process: the verifier and webhook workers join in. The
		// in-process verifier is one of the fleet like any other (docs/fleet.md), except in the
		// demo: its mail world is simulated, and its answers (no MX for every real domain) must
		// not reach the shared caches, which a later `make run` on the same store would read.
		if demo == nil {
			fl, err := fleet.New(ctx, in.JS, in.Layout, fleet.Options{Log: log, Metrics: in.Metrics})
			if err != nil {
				return err
			}
			// The sessions end (QUIT, connection closed) before their fleet slots are given up,
			// so that a waiting worker's session never overlaps one of ours (docs/fleet.md).
			defer func() { engine.Close(); fl.Close() }()
			engine.Join(verify.Fleet{Slots: fl.Slots, MX: fl.MX, CatchAll: fl.CatchAll})
		}
		parts = append(parts, verifyworker.Services(verifyworker.Deps{Pool: in.Pool, NATS: in.NATS, JS: in.JS, Layout: in.Layout, Pipe: engine, Log: log,
			Metrics: in.Metrics, Ready: in.Ready}.WithConfig(cfg))...)
		hooks, err := webhook.Services(in.Pool, in.JS, in.Layout, webhook.Config{AllowPrivate: cfg.WebhookAllowPrivate, DNSResolver: cfg.DNSResolver, Secrets: cfg.Secrets}, 64, log, in.Metrics, in.Ready)
		if err != nil {
			return err
		}
		parts = append(parts, hooks...)
	}
	// A stop first fails /readyz and serves on for MAILVET_SHUTDOWN_DELAY, then drains.
	runCtx, stopLinger := in.Linger(ctx, cfg.ShutdownDelay)
	defer stopLinger()
	err = in.Run(runCtx, parts...)
	log.Info("api stopped")
	return err
}

// devMailFrom is the sender of dev mode's mail to its sink.
const devMailFrom = "mailvet@localhost"

// mailRelay is the relay of the dashboard's mail (docs/operations.md, "Mail"): the operator's
// (MAILVET_MAIL_*), or in dev mode without one a sink on loopback that keeps the mail and logs
// its links, so that `make run` and `make demo` show the confirmation link (docs/development.md,
// "Mail in dev mode"). Without either, nil: sign-ups are not confirmed (MAILVET_DASHBOARD_SIGNUP,
// checked at start-up by config.CheckSignupMail) and there is no password reset by email.
func mailRelay(cfg config.Config, log *slog.Logger) (dashboard.Mailer, func(), error) {
	if cfg.Mail.Addr != "" {
		if cfg.Mail.AllowPlaintext {
			log.Warn("MAILVET_MAIL_ALLOW_PLAINTEXT=true: a relay without STARTTLS gets sign-in links in clear")
		}
		return mailer.New(mailer.Config{Addr: cfg.Mail.Addr, From: cfg.Mail.From, Username: cfg.Mail.Username,
			Password: cfg.Mail.Password, AllowPlaintext: cfg.Mail.AllowPlaintext}), func() {}, nil
	}
	if !cfg.Dev {
		return nil, func() {}, nil
	}
	sink, err := mailsink.Start(net.JoinHostPort(config.DevHost, "0"), mailsink.Options{Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("dev mail sink: %w", err)
	}
	log.Info("dev mode: the dashboard's mail goes to a sink on loopback, which logs its links", "sink", sink.Addr())
	return mailer.New(mailer.Config{Addr: sink.Addr(), From: devMailFrom}), func() { _ = sink.Close() }, nil
}

// devBanner issues the demo account's keys and prints them with ready-to-paste examples (and, in
// the demo world, the demo addresses) for a newcomer.
func devBanner(ctx context.Context, store *account.Store, cfg config.Config, addr string, demo bool, w io.Writer) error {
	base := "http://localhost" + addr[strings.LastIndex(addr, ":"):]
	creds, err := admin.DevBootstrap(ctx, store, cfg.Plans)
	if err != nil {
		return fmt.Errorf("dev bootstrap: %w", err)
	}
	creds.Plan = cfg.Plans[plan.Free]
	example := "ann@example.com"
	if demo {
		example = mailsim.DemoAddresses[0].Email
	}
	creds.Write(w, base, example)
	if demo {
		writeDemoAddresses(w)
	}
	confirm := "open the confirmation link in the log" // the dev sink's (mailRelay)
	if cfg.Mail.Addr != "" {
		confirm = "open the confirmation link mailed to you"
	}
	fmt.Fprintf(w, "Dashboard: %s/dashboard/ (sign up, then %s; its playground verifies with your keys; %s/ leads there)\n", base, confirm, base)
	fmt.Fprintf(w, "API reference: %s/openapi.json, errors: %s/docs/errors\n", base, base)
	fmt.Fprintf(w, "Mailvet is running on %s (try /healthz). Ctrl-C stops it.\n", base)
	return nil
}

// holdSweep is how often each API replica ends the usage holds whose lifetime has passed. A killed
// replica's room is back within its requests' hold lifetime plus this (docs/reliability.md,
// "Metering guarantees").
const holdSweep = 10 * time.Second

// expireHolds runs the only metering sweep (usage.Expire); every replica may do it at once.
func expireHolds(ctx context.Context, in *app.Infra, log *slog.Logger) error {
	return loop.Every(ctx, holdSweep, func(ctx context.Context) {
		n, err := usage.Expire(ctx, in.Pool)
		if n > 0 {
			log.Warn("usage: ended the holds of requests whose replica died", "holds", n)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("usage: expire holds", "err", err)
		}
	})
}

// sweepIdempotencyKeys deletes the Idempotency-Keys whose 24 hours have passed, once a minute;
// every replica may do it at once (idempotency.Sweep).
func sweepIdempotencyKeys(ctx context.Context, in *app.Infra, log *slog.Logger) error {
	return loop.Every(ctx, time.Minute, func(ctx context.Context) {
		if _, err := idempotency.Sweep(ctx, in.Pool, time.Now()); err != nil && ctx.Err() == nil {
			log.Warn("sweep idempotency keys", "err", err)
		}
	})
}

// sweepDashboard deletes the dashboard's sign-in counters, sessions, mailed links and upload
// tokens whose time is over, every ten minutes; every replica may do it at once (dashboard.Sweep,
// docs/personal-data.md).
func sweepDashboard(ctx context.Context, in *app.Infra, log *slog.Logger) error {
	return loop.Every(ctx, 10*time.Minute, func(ctx context.Context) {
		if _, err := dashboard.Sweep(ctx, in.Pool, time.Now()); err != nil && ctx.Err() == nil {
			log.Warn("sweep the dashboard's expired rows", "err", err)
		}
	})
}

// pruneRateWindows deletes expired rate-limit windows once a minute; every replica may do it.
func pruneRateWindows(ctx context.Context, in *app.Infra, log *slog.Logger) error {
	return loop.Every(ctx, time.Minute, func(ctx context.Context) {
		if _, err := usage.PruneRateWindows(ctx, in.Pool, time.Now()); err != nil && ctx.Err() == nil {
			log.Warn("prune rate windows", "err", err)
		}
	})
}
