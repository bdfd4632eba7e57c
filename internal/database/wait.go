package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/redact"
)

// Waits between OpenWait's attempts: exponential with jitter from openWaitFirst, capped at
// openWaitMax, so a Postgres that comes up a moment later is found quickly and one that takes
// minutes is not hammered.
const (
	openWaitFirst = 250 * time.Millisecond
	openWaitMax   = 5 * time.Second
)

// OpenWait is Open for process start-up: when Postgres is not up yet (a container still
// starting, a failover under way) it waits, retrying with backoff until it answers or ctx ends,
// and logs each wait. It has no overall limit of its own; the caller's ctx is the limit.
//
// Errors that waiting cannot fix are returned at once: an invalid URL, a failed authentication
// (SQLSTATE 28P01, 28000), and a database that does not exist (3D000), whose error says how to
// create it.
func OpenWait(ctx context.Context, databaseURL string, log *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(openWaitFirst),
		backoff.WithMaxInterval(openWaitMax), backoff.WithMaxElapsedTime(0))
	for {
		pool, err := OpenConfig(ctx, cfg.Copy())
		if err == nil {
			return pool, nil
		}
		if perm := permanent(cfg, err); perm != nil {
			return nil, perm
		}
		if ctx.Err() != nil {
			return nil, gaveUp(ctx, databaseURL, err)
		}
		wait := b.NextBackOff()
		if log != nil {
			log.Warn("waiting for Postgres", "url", redact.URL(databaseURL), "retry_in", wait, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp(ctx, databaseURL, err)
		case <-t.C:
		}
	}
}

func gaveUp(ctx context.Context, databaseURL string, last error) error {
	return fmt.Errorf("gave up waiting for Postgres at %s: %w (last error: %v)", redact.URL(databaseURL), context.Cause(ctx), last)
}

// permanent returns the error to stop OpenWait with when err cannot go away by waiting, else nil.
func permanent(cfg *pgxpool.Config, err error) error {
	if missing := missingDatabase(cfg, err); missing != nil {
		return missing
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "28P01", "28000": // invalid_password, invalid_authorization_specification
		return err
	}
	return nil
}

// missingDatabase returns, when err says that the database of cfg does not exist (SQLSTATE
// 3D000, invalid_catalog_name), an error that says how to create it; else nil. Postgres itself
// is running in that case, so the answer must not send the operator looking for it.
func missingDatabase(cfg *pgxpool.Config, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		return nil
	}
	return fmt.Errorf("database %q does not exist: run `bin/api migrate` (or `make migrate`) to create it: %w",
		cfg.ConnConfig.Database, err)
}
