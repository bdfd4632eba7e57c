// Package database opens the Postgres pool, creates the database when it is missing, and applies
// the embedded migrations.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/migrations"
)

// Open connects a pool to databaseURL and checks that the server answers. Connect timeouts are
// short so that a dead Postgres shows up as an error, never as a hang; every call on the pool has
// a deadline (QueryTimeout unless the caller sets its own).
func Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	pool, err := OpenConfig(ctx, cfg)
	if missing := missingDatabase(cfg, err); missing != nil {
		return nil, missing
	}
	return pool, err
}

// ParseConfig is the pool configuration Open uses for databaseURL, for callers that adjust it
// (AddTracer) before OpenConfig.
func ParseConfig(databaseURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "mailvet"
	}
	cfg.HealthCheckPeriod = 10 * time.Second
	AddTracer(cfg.ConnConfig, deadlineTracer{timeout: QueryTimeout})
	return cfg, nil
}

// OpenConfig connects a pool with cfg (from ParseConfig) and checks that the server answers.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w", redact.URL(cfg.ConnString()), err)
	}
	return pool, nil
}

// Migrate applies every pending migration. Concurrent callers (several replicas starting at once)
// are serialised by a Postgres advisory lock held by goose.
func Migrate(ctx context.Context, databaseURL string, log *slog.Logger) (applied int, err error) {
	db, err := openSQL(databaseURL, log)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return 0, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return 0, fmt.Errorf("load migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("apply migrations: %w", err)
	}
	// One line for the whole run: how many migrations the database has now and how many of them
	// this run applied (docs/operations.md, "Logs").
	if log != nil {
		var took time.Duration
		for _, r := range results {
			took += r.Duration
		}
		version, err := p.GetDBVersion(ctx)
		if err != nil {
			return len(results), fmt.Errorf("read the schema version: %w", err)
		}
		attrs := []any{"version", version}
		if len(results) > 0 {
			attrs = append(attrs, "took", took)
		}
		log.Info(fmt.Sprintf("migrations: %d applied, %d new", appliedCount(p, version), len(results)), attrs...)
	}
	return len(results), nil
}

// appliedCount is how many of p's migrations are at or below version, the database's schema
// version: the migrations it has.
func appliedCount(p *goose.Provider, version int64) int {
	n := 0
	for _, src := range p.ListSources() {
		if src.Version <= version {
			n++
		}
	}
	return n
}

func openSQL(databaseURL string, log *slog.Logger) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if log != nil {
		cfg.OnNotice = logWarning(log)
	}
	return stdlib.OpenDB(*cfg), nil
}

// logWarning logs a migration's WARNING: what a migration found that it could not settle by
// itself and leaves to the operator (migration 35's dashboard users whose emails are one address
// once Unicode-normalised; docs/operations.md, "bin/api migrate"). A migration's warning names
// rows by id, never by email. Lesser notices ("does not exist, skipping") are left out.
func logWarning(log *slog.Logger) pgconn.NoticeHandler {
	return func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Severity == "WARNING" {
			log.Warn("migrations: " + n.Message)
		}
	}
}

// EnsureDatabase creates the database named in databaseURL when it does not exist yet, by
// connecting to the server's "postgres" maintenance database. Used by `api migrate`, dev mode and
// tests. Several processes may call it at once for the same missing database (every replica's
// migrate job, docs/operations.md): whichever loses the race finds the database created and
// returns nil.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || name == "postgres" {
		return nil
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("connect to Postgres at %s: %w", redact.URL(admin.String()), err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if createdMeanwhile(err) {
		return nil
	}
	return err
}

// createdMeanwhile tells whether CREATE DATABASE failed because another process created the same
// database since the existence check. Postgres says so in one of two ways: duplicate_database
// (42P04) when the other's database was already committed when ours began, or, when both
// CREATE DATABASE statements ran at once, a unique violation (23505) on pg_database's name index:
// the loser waited on the winner's catalog row and finds it committed. No other unique violation
// is taken for "exists".
//
// This is preferred to serialising the creates with an advisory lock on the maintenance database:
// it needs no lock key shared with every other tool that creates databases on the server, and it
// also holds against a creator that does not take the lock (an older Mailvet, an operator's psql).
func createdMeanwhile(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "42P04" ||
		pgErr.Code == "23505" && pgErr.ConstraintName == "pg_database_datname_index"
}

// DB is what Mailvet's stores need of Postgres: a *pgxpool.Pool, a pgx.Tx or a *pgx.Conn. Every
// store takes this one interface, so any of them can run inside a transaction another started.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}
