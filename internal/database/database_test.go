package database_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/migrations"
)

// schema lists every column of the public schema, to show that a second migrate changes nothing.
func schema(t *testing.T, url string) string {
	t.Helper()
	pool := pgtest.Pool(t, url)
	rows, err := pool.Query(context.Background(), `
		SELECT table_name || '.' || column_name || ':' || data_type
		FROM information_schema.columns WHERE table_schema = 'public'
		ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, s)
	}
	return strings.Join(cols, "\n")
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	ctx := context.Background()

	n, err := database.Migrate(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("first migrate applied nothing")
	}
	before := schema(t, url)
	for _, table := range []string{"accounts.", "api_keys.", "usage_log.", "usage_monthly.", "jobs.", "deliveries.", "delivery_attempts.", "stripe_events."} {
		if !strings.Contains(before, table) {
			t.Errorf("schema lacks table %s", strings.TrimSuffix(table, "."))
		}
	}

	n, err = database.Migrate(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("second migrate applied %d migrations, want 0", n)
	}
	if after := schema(t, url); after != before {
		t.Errorf("schema changed on second migrate:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// A migration run logs one line: how many migrations the database has, and how many are new.
func TestMigrateLogsOneSummaryLine(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	ctx := context.Background()
	total := 0
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			total++
		}
	}
	for _, want := range []string{fmt.Sprintf("migrations: %d applied, %d new", total, total), fmt.Sprintf("migrations: %d applied, 0 new", total)} {
		var logs bytes.Buffer
		if _, err := database.Migrate(ctx, url, slog.New(slog.NewJSONHandler(&logs, nil))); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		var rec struct{ Msg string }
		if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.Msg != want {
			t.Errorf("logs:\n%s\nwant one line with msg %q", logs.String(), want)
		}
	}
}

// Several replicas starting at once must not trip over each other's migrations.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	errs := make(chan error, 3)
	total := make(chan int, 3)
	for range 3 {
		go func() {
			n, err := database.Migrate(context.Background(), url, nil)
			errs <- err
			total <- n
		}()
	}
	sum := 0
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		sum += <-total
	}
	var files int
	pool := pgtest.Pool(t, url)
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&files); err != nil {
		t.Fatal(err)
	}
	if sum != files {
		t.Errorf("replicas applied %d migrations in all, the database records %d", sum, files)
	}
}

func TestEnsureDatabaseCreatesMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := fmt.Sprintf("mailvet_ensure_%d", time.Now().UnixNano())
	u, _ := url.Parse(pgtest.BaseURL())
	u.Path = "/" + name
	admin := pgtest.Pool(t, strings.Replace(u.String(), "/"+name, "/postgres", 1))
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	for range 2 { // the second call finds it and does nothing
		if err := database.EnsureDatabase(ctx, u.String()); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 1 {
		t.Fatalf("database %s: count %d, %v", name, n, err)
	}
}

// Every replica's migrate job may create the missing database at the same moment
// (docs/operations.md, "bin/api migrate"): all of them succeed, and the database exists once.
func TestEnsureDatabaseConcurrently(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 3 { // a race lost by nobody proves nothing: try a few fresh names
		name := fmt.Sprintf("mailvet_ensure_race_%d_%d", time.Now().UnixNano(), round)
		u, _ := url.Parse(pgtest.BaseURL())
		u.Path = "/" + name
		admin := pgtest.Pool(t, strings.Replace(u.String(), "/"+name, "/postgres", 1))
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		})
		const replicas = 8
		start := make(chan struct{})
		errs := make(chan error, replicas)
		for range replicas {
			go func() {
				<-start
				errs <- database.EnsureDatabase(ctx, u.String())
			}()
		}
		close(start)
		for range replicas {
			if err := <-errs; err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 1 {
			t.Fatalf("database %s: count %d, %v", name, n, err)
		}
	}
}
