package database

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/migrations"
)

// SchemaVersion is the newest migration this build carries: the number that starts the name of
// the last file of migrations/.
func SchemaVersion() (int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return 0, err
	}
	var newest int64
	for _, n := range names {
		num, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: no version number", n)
		}
		newest = max(newest, v)
	}
	return newest, nil
}

// AppliedVersion is the newest migration applied to the database (goose's version table); 0
// for a database never migrated.
func AppliedVersion(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var v int64
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version`).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		return 0, nil
	}
	return v, err
}

// WaitSchema waits until the database has every migration this build needs, so that a process
// started against a database created but not migrated yet (a managed database, with the migrate
// job still running) neither reports ready nor answers every request with a 503: it logs what to
// do and retries with backoff until ctx ends. A database ahead of the build (a newer release
// migrated it first, during a rolling upgrade) is fine: migrations only add.
func WaitSchema(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	need, err := SchemaVersion()
	if err != nil {
		return err
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(openWaitFirst),
		backoff.WithMaxInterval(openWaitMax), backoff.WithMaxElapsedTime(0))
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		have, err := AppliedVersion(qctx, pool)
		cancel()
		if err == nil && have >= need {
			return nil
		}
		why := fmt.Sprintf("the database schema is at migration %d, this build needs %d: run `bin/api migrate`", have, need)
		if err != nil {
			why = fmt.Sprintf("reading the schema version: %v", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gave up waiting for the database schema: %w (%s)", context.Cause(ctx), why)
		}
		wait := b.NextBackOff()
		if log != nil {
			log.Warn("waiting for the database schema", "reason", why, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gave up waiting for the database schema: %w (%s)", context.Cause(ctx), why)
		case <-t.C:
		}
	}
}
