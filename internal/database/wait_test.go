package database_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func logger() (*slog.Logger, *logtest.Buffer) {
	buf := &logtest.Buffer{}
	return slog.New(slog.NewJSONHandler(buf, nil)), buf
}

// Postgres that comes up a second late is waited for, and the pool works.
func TestOpenWaitWaitsForPostgres(t *testing.T) {
	t.Parallel()
	dbURL, proxy := pgtest.Proxied(t, pgtest.URL(t))
	proxy.Cut()
	time.AfterFunc(time.Second, proxy.Restore)
	log, buf := logger()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	pool, err := database.OpenWait(ctx, dbURL, log)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	t.Logf("OpenWait returned after %v", time.Since(start))
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("OpenWait returned after %v, before Postgres was reachable", took)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("pool does not work: %d, %v", n, err)
	}
	logs := buf.String()
	waits := strings.Count(logs, "waiting for Postgres")
	if waits == 0 {
		t.Errorf("no wait logged:\n%s", logs)
	}
	// 250 ms doubling, with jitter: a second of outage is a handful of attempts, each logged once.
	if waits > 6 {
		t.Errorf("%d waits logged for a 1 s outage:\n%s", waits, logs)
	}
	if !strings.Contains(logs, redact.URL(dbURL)) {
		t.Errorf("the wait log does not name the (redacted) URL:\n%s", logs)
	}
}

// A database that does not exist will not appear by waiting: the error says how to create it.
func TestOpenWaitMissingDatabaseSaysMigrate(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(pgtest.BaseURL())
	u.Path = "/mailvet_missing_" + strings.ReplaceAll(t.Name(), "/", "_")
	log, buf := logger()
	start := time.Now()
	pool, err := database.OpenWait(context.Background(), u.String(), log)
	if err == nil {
		pool.Close()
		t.Fatal("OpenWait opened a database that does not exist")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v, want an answer at once", took)
	}
	for _, want := range []string{"does not exist", "bin/api migrate", "make migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(buf.String(), "waiting for Postgres") {
		t.Errorf("waited for a missing database:\n%s", buf)
	}
}

// Open (the admin commands' one attempt) explains a missing database the same way.
func TestOpenMissingDatabaseSaysMigrate(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(pgtest.BaseURL())
	u.Path = "/mailvet_missing_" + strings.ReplaceAll(t.Name(), "/", "_")
	pool, err := database.Open(context.Background(), u.String())
	if err == nil {
		pool.Close()
		t.Fatal("Open opened a database that does not exist")
	}
	if !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "bin/api migrate") {
		t.Errorf("error %q does not say to run bin/api migrate", err)
	}
}

func TestOpenWaitInvalidURLFailsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := database.OpenWait(context.Background(), "postgres://h:notaport/db", nil)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("err %v, want a DATABASE_URL parse error", err)
	}
}

// The caller's context is the only limit, and it is honoured promptly, also mid-wait.
func TestOpenWaitStopsWithTheContext(t *testing.T) {
	t.Parallel()
	dbURL, proxy := pgtest.Proxied(t, pgtest.URL(t))
	proxy.Cut() // never restored

	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := database.OpenWait(ctx, dbURL, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the context's", err)
	}
	if took := time.Since(start); took > 700*time.Millisecond+500*time.Millisecond {
		t.Errorf("returned %v after the start, the context ended at 700 ms", took)
	}

	done, stop := context.WithCancel(context.Background())
	stop()
	start = time.Now()
	if _, err := database.OpenWait(done, dbURL, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err %v", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a cancelled context took %v", took)
	}
}
