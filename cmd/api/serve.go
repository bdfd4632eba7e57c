package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

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

	srv := api.New(api.Deps{Config: cfg, Log: log, Pool: in.Pool, NATS: in.NATS, JS: in.JS, Ready: in.Ready, Metrics: in.Metrics})
	httpSrv, err := app.Listen(cfg.HTTPAddr, srv.Handler())
	if err != nil {
		return fmt.Errorf("MAILVET_HTTP_ADDR: %w", err)
	}
	log.Info("api listening", "addr", httpSrv.Addr(), "ops", in.OpsAddr(), "dev", cfg.Dev)
	if cfg.Dev {
		fmt.Fprintf(stdout, "Mailvet is running on http://localhost%s (try /healthz). Ctrl-C stops it.\n",
			httpSrv.Addr()[strings.LastIndex(httpSrv.Addr(), ":"):])
	}
	err = in.Run(ctx, func(ctx context.Context) error { return httpSrv.Serve(ctx, app.ShutdownGrace, log) })
	log.Info("api stopped")
	return err
}
