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

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/natstest"
	"github.com/mailvet/mailvet/internal/pgtest"
	"github.com/mailvet/mailvet/internal/tcpproxy"
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

// A dependency that is down at start-up is a clear error, not a hang.
func TestStartFailsFastWithoutPostgres(t *testing.T) {
	t.Parallel()
	dbURL, p := throughProxy(t, pgtest.BaseURL())
	p.Cut()
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL, "NATS_URL": natstest.URL(t), "MAILVET_METRICS_ADDR": "127.0.0.1:0"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = app.Start(context.Background(), cfg, "test", app.NewLogger(io.Discard, "test"))
	if err == nil || !strings.Contains(err.Error(), "Postgres") {
		t.Fatalf("Start = %v, want a Postgres error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Start took %v to fail", took)
	}
}
