package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/freeport"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// throughProxy rewrites rawURL's host to go through a tcpproxy that t can cut.
func throughProxy(t *testing.T, rawURL string) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

func readyz(t *testing.T, addr string) (int, health.Report) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep health.Report
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("readyz body %q: %v", body, err)
	}
	return resp.StatusCode, rep
}

// waitReady polls /readyz until it answers want or the deadline passes.
func waitReady(t *testing.T, addr string, want int, within time.Duration) health.Report {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, rep := readyz(t, addr)
		if code == want {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz stayed %d (%+v), want %d", code, rep, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// /readyz goes not-ready when Postgres or NATS becomes unreachable and ready again when it
// returns; the process itself keeps running throughout (/healthz stays 200).
func TestReadyzFollowsDependencies(t *testing.T) {
	t.Parallel()
	dbURL, pgProxy := throughProxy(t, pgtest.URL(t))
	natsURL, natsProxy := throughProxy(t, natstest.URL(t))

	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{
			"DATABASE_URL": dbURL, "NATS_URL": natsURL,
			"MAILVET_METRICS_ADDR": "127.0.0.1:0", "MAILVET_DNS_RESOLVER": "127.0.0.1:53",
		}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in, err := app.Start(ctx, cfg, "test", app.NewLogger(io.Discard, "test"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		in.Close()
	})
	addr := in.OpsAddr()

	waitReady(t, addr, http.StatusOK, 5*time.Second)

	pgProxy.Cut()
	rep := waitReady(t, addr, http.StatusServiceUnavailable, 5*time.Second)
	if rep.Status != "not_ready" || rep.Checks["postgres"] == "ok" || rep.Checks["nats"] != "ok" {
		t.Errorf("with Postgres down: %+v", rep)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz while Postgres is down: %v %v", resp, err)
	}
	pgProxy.Restore()
	waitReady(t, addr, http.StatusOK, 10*time.Second)

	natsProxy.Cut()
	rep = waitReady(t, addr, http.StatusServiceUnavailable, 5*time.Second)
	if rep.Checks["nats"] == "ok" || rep.Checks["postgres"] != "ok" {
		t.Errorf("with NATS down: %+v", rep)
	}
	natsProxy.Restore()
	waitReady(t, addr, http.StatusOK, 10*time.Second)

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("/metrics lacks Go runtime metrics")
	}
}

// A process started before its Postgres and NATS are up waits for them (with backoff, logging
// what it waits for) instead of exiting, and serves once they answer.
func TestStartWaitsForPostgresAndNATS(t *testing.T) {
	t.Parallel()
	dbURL, pgProxy := throughProxy(t, pgtest.URL(t))
	natsURL, natsProxy := throughProxy(t, natstest.URL(t))
	pgProxy.Cut()
	natsProxy.Cut()
	ops := freeport.Addr(t)
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL, "NATS_URL": natsURL, "MAILVET_METRICS_ADDR": ops}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	log := app.NewLogger(&logs, "test")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type started struct {
		in  *app.Infra
		err error
	}
	done := make(chan started, 1)
	go func() {
		in, err := app.Start(ctx, cfg, "test", log)
		done <- started{in, err}
	}()

	select {
	case s := <-done:
		t.Fatalf("Start returned while Postgres was down: %v", s.err)
	case <-time.After(1500 * time.Millisecond):
	}
	// While it waits, the ops listener answers: alive, not ready, and why.
	waitingFor := func(what string) {
		t.Helper()
		resp, err := http.Get("http://" + ops + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz while waiting for %s: %v %v", what, resp, err)
		}
		resp.Body.Close()
		if code, rep := readyz(t, ops); code != http.StatusServiceUnavailable || rep.Checks["startup"] != "starting: waiting for "+what {
			t.Errorf("/readyz while waiting for %s: %d %+v", what, code, rep)
		}
	}
	waitingFor("Postgres")
	pgProxy.Restore()
	select {
	case s := <-done:
		t.Fatalf("Start returned while NATS was down: %v", s.err)
	case <-time.After(1500 * time.Millisecond):
	}
	waitingFor("NATS")
	natsProxy.Restore()
	var s started
	select {
	case s = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return within 15 s of Postgres and NATS coming up")
	}
	if s.err != nil {
		t.Fatalf("Start: %v", s.err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- s.in.Run(ctx) }()
	defer func() { cancel(); <-runDone; s.in.Close() }()
	rep := waitReady(t, s.in.OpsAddr(), http.StatusOK, 10*time.Second)
	if _, waiting := rep.Checks["startup"]; rep.Checks["streams"] != "ok" || waiting {
		t.Errorf("ready without the streams check, or with the start-up's: %+v", rep)
	}
	for _, want := range []string{"waiting for Postgres", "waiting for NATS"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log never says %q", want)
		}
	}
}

// A start-up that waits is still bounded by its context, and then says what it waited for.
func TestStartWaitGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	dbURL, p := throughProxy(t, pgtest.BaseURL())
	p.Cut()
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL, "NATS_URL": natstest.URL(t), "MAILVET_METRICS_ADDR": "127.0.0.1:0"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = app.Start(ctx, cfg, "test", app.NewLogger(io.Discard, "test"))
	if err == nil || !strings.Contains(err.Error(), "Postgres") {
		t.Fatalf("Start = %v, want a Postgres error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Start took %v to give up after its 1 s context ended", took)
	}
}

// A database that does not exist is not waited for: the error says how to create it.
func TestStartSaysToMigrateAMissingDatabase(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(pgtest.BaseURL())
	u.Path = "/mailvet_missing_" + strings.ReplaceAll(t.Name(), "/", "_")
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{"DATABASE_URL": u.String(), "NATS_URL": natstest.URL(t), "MAILVET_METRICS_ADDR": "127.0.0.1:0"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = app.Start(ctx, cfg, "test", app.NewLogger(io.Discard, "test"))
	if err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("Start = %v, want the advice to run migrate", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Start took %v to refuse a missing database", took)
	}
}

// A database that exists but is not migrated yet (a managed database, the migrate job still
// running) is waited for: the process neither reports ready nor answers every request with a 503
// meanwhile, and starts once the migrations are in.
func TestStartWaitsForTheSchema(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.EmptyURL(t)
	ops := freeport.Addr(t)
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL, "NATS_URL": natstest.URL(t), "MAILVET_METRICS_ADDR": ops}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type started struct {
		in  *app.Infra
		err error
	}
	done := make(chan started, 1)
	go func() {
		in, err := app.Start(ctx, cfg, "test", app.NewLogger(&logs, "test"))
		done <- started{in, err}
	}()
	select {
	case s := <-done:
		t.Fatalf("Start returned before the database was migrated: %v", s.err)
	case <-time.After(1500 * time.Millisecond):
	}
	if code, rep := readyz(t, ops); code != http.StatusServiceUnavailable || !strings.Contains(rep.Checks["startup"], "schema") {
		t.Errorf("/readyz while the schema is missing: %d %+v", code, rep)
	}
	if !strings.Contains(logs.String(), "bin/api migrate") {
		t.Errorf("the log does not say to migrate: %s", logs.String())
	}
	if _, err := database.Migrate(ctx, dbURL, nil); err != nil {
		t.Fatal(err)
	}
	var s started
	select {
	case s = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return within 15 s of the migration")
	}
	if s.err != nil {
		t.Fatalf("Start: %v", s.err)
	}
	// Started, but the binary has not set up its own parts yet (Run not called): not ready.
	if code, rep := readyz(t, ops); code != http.StatusServiceUnavailable || rep.Checks["startup"] != "starting: waiting for the process's own set-up" {
		t.Errorf("/readyz between Start and Run: %d %+v", code, rep)
	}
	s.in.Close()
}
