package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/admin"
	"github.com/mailvet/mailvet/internal/api"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
)

// serve runs the API (and, in dev mode, the workers in-process) until ctx ends, then drains.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	in, err := app.Start(ctx, cfg, "api", log)
	if err != nil {
		return err
	}
	defer in.Close()

	store := account.NewStore(in.Pool)
	// Plans are configuration (MAILVET_PLAN_*); SQL-side limit checks read the plans table, so it is
	// brought in line before the first request.
	if err := store.SyncPlans(ctx, cfg.Plans, cfg.OverageEUR); err != nil {
		return err
	}
	srv := api.New(api.Deps{Config: cfg, Log: log, Pool: in.Pool, NATS: in.NATS, JS: in.JS, Ready: in.Ready, Metrics: in.Metrics})
	httpSrv, err := app.Listen(cfg.HTTPAddr, srv.Handler())
	if err != nil {
		return fmt.Errorf("MAILVET_HTTP_ADDR: %w", err)
	}
	log.Info("api listening", "addr", httpSrv.Addr(), "ops", in.OpsAddr(), "dev", cfg.Dev)
	if cfg.Dev {
		base := "http://localhost" + httpSrv.Addr()[strings.LastIndex(httpSrv.Addr(), ":"):]
		creds, err := admin.DevBootstrap(ctx, store)
		if err != nil {
			return fmt.Errorf("dev bootstrap: %w", err)
		}
		creds.Write(stdout, base)
		fmt.Fprintf(stdout, "Mailvet is running on %s (try /healthz). Ctrl-C stops it.\n", base)
	}
	err = in.Run(ctx, func(ctx context.Context) error { return httpSrv.Serve(ctx, app.ShutdownGrace, log) })
	log.Info("api stopped")
	return err
}
