package webhook

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// readyz is the HTTP status of GET /readyz on a process's ops listener.
func readyz(t testing.TB, addr string) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitReadyz polls /readyz until it answers want, for at most limit, and returns how long it took.
func waitReadyz(t testing.TB, addr string, want int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for readyz(t, addr) != want {
		if time.Since(start) > limit {
			t.Fatalf("/readyz did not answer %d within %v", want, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// A webhook worker wired as bin/webhook-worker wires it (app.Start, the worker with the
// readiness check of Services), whose NATS and Postgres each go through a proxy. With either cut,
// its /readyz goes 503; a delivery published meanwhile waits; when the dependency returns the
// worker is ready again and delivers it, without a restart (docs/reliability.md).
func TestWorkerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(200))
	natsCut, err := tcpproxy.Start(strings.TrimPrefix(b.natsURL, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsCut.Close() })
	dbURL, pgCut := pgtest.Proxied(t, b.pool.Config().ConnString())
	env := map[string]string{
		"DATABASE_URL": dbURL, "NATS_URL": "nats://" + natsCut.Addr(),
		"MAILVET_METRICS_ADDR": "127.0.0.1:0", "MAILVET_DNS_RESOLVER": b.dns,
	}
	cfg, err := config.Load(config.RoleWebhook, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in, err := app.Start(ctx, cfg, "webhook-worker", app.NewLogger(io.Discard, "webhook-worker"))
	if err != nil {
		t.Fatal(err)
	}
	// Services' worker, with the test CA and DNS so that it can reach the receiver.
	w, err := NewWorker(in.Pool, in.JS, Options{Layout: in.Layout, Log: in.Log, Metrics: in.Metrics,
		Client: ClientOptions{AllowPrivate: true, DNSResolver: b.dns, RootCAs: getCA(t).Pool}})
	if err != nil {
		t.Fatal(err)
	}
	in.Ready.Add("consumer webhooks", w.Ready)
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, w.Run) }()
	t.Cleanup(func() {
		pgCut.Restore()
		natsCut.Restore()
		cancel()
		<-done
		in.Close()
	})
	addr := in.OpsAddr()
	waitReadyz(t, addr, http.StatusOK, 10*time.Second)
	if r := b.waitFinal(t, b.create(t, b.accountID, rc.url("/before"), "", sampleBody, true), 15*time.Second); r.state != StateDelivered {
		t.Fatalf("before any cut: %+v", r)
	}

	for _, dep := range []struct {
		name  string
		proxy *tcpproxy.Proxy
	}{{"NATS", natsCut}, {"Postgres", pgCut}} {
		dep.proxy.Cut()
		waitReadyz(t, addr, http.StatusServiceUnavailable, 5*time.Second)
		id := b.create(t, b.accountID, rc.url("/during-"+dep.name), "", sampleBody, true)
		time.Sleep(300 * time.Millisecond)
		if r := b.row(t, id); r.state == StateDelivered {
			t.Fatalf("%s cut: delivered while the worker could not work", dep.name)
		}
		dep.proxy.Restore()
		restored := time.Now()
		took := waitReadyz(t, addr, http.StatusOK, 10*time.Second)
		if r := b.waitFinal(t, id, 10*time.Second); r.state != StateDelivered {
			t.Fatalf("%s back: delivery %+v", dep.name, r)
		}
		t.Logf("%s back: /readyz 200 after %v, delivery done after %v", dep.name, took.Round(time.Millisecond), time.Since(restored).Round(time.Millisecond))
	}

	// Every delivery was taken from the WEBHOOKS stream, and its wait recorded.
	fams, err := in.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lagged uint64
	for _, f := range fams {
		if f.GetName() == "mailvet_queue_lag_seconds" {
			for _, m := range f.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == "webhooks" {
					lagged = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if lagged < 3 {
		t.Errorf("mailvet_queue_lag_seconds{consumer=\"webhooks\"}: %d samples, want at least the 3 deliveries", lagged)
	}
}
