// Package pgtest gives each test an isolated, migrated database on the real Postgres server
// (DATABASE_URL, or the default of docs/operations.md) and drops it when the test ends.
//
// The migrations run once per schema version into a template database; each test then gets a
// copy made by CREATE DATABASE … TEMPLATE, which takes tens of milliseconds instead of replaying
// every migration.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/migrations"
)

// Advisory lock keys that serialise template builds and clones across test processes (go test
// runs packages in parallel, and Postgres refuses to copy a template that another session uses).
const (
	lockTemplate = 0x6d76_0001
	lockClone    = 0x6d76_0002
)

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// BaseURL is the server under test: DATABASE_URL or the default.
func BaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return config.DefaultDatabaseURL
}

// withDB returns base with its database name replaced.
func withDB(base, name string) string {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

func unreachable(t testing.TB, err error) {
	t.Helper()
	t.Fatalf("pgtest: Postgres is not reachable at %s: %v\n"+
		"Run the tests with `make test`, which starts the project's private Postgres when none answers\n"+
		"(scripts/devdb.sh; docs/operations.md, \"A private Postgres for development\"),\n"+
		"or point DATABASE_URL at a server where this user may create databases.",
		redact.URL(withDB(BaseURL(), "postgres")), err)
}

func admin(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, withDB(BaseURL(), "postgres"))
}

// schemaHash names the template after the migrations' content, so a changed migration gets a
// fresh template.
func schemaHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := migrations.FS.ReadFile(path)
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func buildTemplate(ctx context.Context) (string, error) {
	name := "mailvet_tmpl_" + schemaHash()
	conn, err := admin(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockTemplate); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, lockTemplate)

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename only when complete, so a run killed halfway never
	// leaves a broken template behind. Templates of other schema versions are left alone: another
	// checkout (a branch with a new migration) may be testing against them right now.
	building := "mailvet_build_" + randomSuffix()
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", err
	}
	if _, err := database.Migrate(ctx, withDB(BaseURL(), building), nil); err != nil {
		_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{building}.Sanitize()+` WITH (FORCE)`)
		return "", err
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{building}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	_, err = conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` IS_TEMPLATE true`)
	return name, err
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createDB makes a database (from template when non-empty) and registers its removal.
func createDB(t testing.TB, template string) string {
	t.Helper()
	stmt := ""
	if template != "" {
		stmt = ` TEMPLATE ` + pgx.Identifier{template}.Sanitize()
	}
	return create(t, stmt)
}

// create runs CREATE DATABASE with options after the new database's name, and registers its
// removal.
func create(t testing.TB, options string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := admin(ctx)
	if err != nil {
		unreachable(t, err)
	}
	defer conn.Close(context.Background())
	name := "mailvet_test_" + randomSuffix()
	stmt := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize() + options
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockClone); err != nil {
		t.Fatalf("pgtest: lock: %v", err)
	}
	_, err = conn.Exec(ctx, stmt)
	_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockClone)
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := admin(ctx)
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return withDB(BaseURL(), name)
}

// URL returns the URL of a fresh, migrated database that is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		templateName, templateErr = buildTemplate(ctx)
	})
	if templateErr != nil {
		unreachable(t, templateErr)
	}
	return createDB(t, templateName)
}

// EmptyURL returns the URL of a fresh database with no schema, for migration tests.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return createDB(t, "")
}

// LocaleURL returns the URL of a fresh database created from template0 in UTF-8 with locale as
// its LC_COLLATE and LC_CTYPE, and migrated: for code that must behave the same whatever locale
// the operator's database was created with (docs/deployment.md). Under "C", lower() and upper()
// change only ASCII letters. It is migrated from scratch, slower than URL's copy of a template.
func LocaleURL(t testing.TB, locale string) string {
	t.Helper()
	return EncodingURL(t, "UTF8", locale)
}

// EncodingURL is LocaleURL in the server encoding given. SQL_ASCII (what initdb gives with the
// "C" locale unless told otherwise) stores text as bytes, and Postgres's Unicode functions
// (normalize()) refuse to run there.
func EncodingURL(t testing.TB, encoding, locale string) string {
	t.Helper()
	quote := func(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
	lit := quote(locale)
	u := create(t, ` TEMPLATE template0 ENCODING `+quote(encoding)+` LC_COLLATE `+lit+` LC_CTYPE `+lit)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := database.Migrate(ctx, u, nil); err != nil {
		t.Fatalf("pgtest: migrate the %s %s-locale database: %v", encoding, locale, err)
	}
	return u
}

// New returns a pool on a fresh, migrated database; pool and database go away when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, URL(t))
}

// Pool opens a pool on databaseURL that is closed when t ends.
func Pool(t testing.TB, databaseURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Open(context.Background(), databaseURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Proxied starts a tcpproxy in front of databaseURL's server and returns the URL that reaches
// the same database through it, for fault tests (Cut, Hold, Restore). The proxy is closed when t
// ends.
func Proxied(t testing.TB, databaseURL string) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// Must fails t with the statement when err is not nil; for terse fixture set-up.
func Must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("pgtest: %s: %v", what, err)
	}
}

// Exec runs a fixture statement and fails t on error.
func Exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	Must(t, err, fmt.Sprintf("exec %q", sql))
}
