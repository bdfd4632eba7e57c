package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// readyzStatus is the HTTP status of GET /readyz on a process's ops listener.
func readyzStatus(t testing.TB, addr string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReadyz polls /readyz until it answers want and returns how long that took.
func waitReadyz(t testing.TB, addr string, want int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		code, body := readyzStatus(t, addr)
		if code == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("/readyz stayed %d %s for %v, want %d", code, body, limit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A verifier worker, wired as bin/verifier-worker wires it (app.Start, verifyworker.Services),
// whose NATS and Postgres each go through a proxy. With either cut its /readyz goes 503; when
// the dependency returns it is ready again and its work resumes by itself: synchronous requests
// and batches (NATS), asynchronous jobs (Postgres, where the runner stores their results).
func TestVerifierWorkerOutage(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	_, key := b.customer(plan.Scale)
	natsCut, err := tcpproxy.Start(strings.TrimPrefix(b.natsURL, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsCut.Close() })
	dbURL, pgCut := pgtest.Proxied(t, b.pool.Config().ConnString())
	env := map[string]string{
		"DATABASE_URL": dbURL, "NATS_URL": "nats://" + natsCut.Addr(),
		"MAILVET_METRICS_ADDR": "127.0.0.1:0", "MAILVET_DNS_RESOLVER": b.mail.DNSAddr(),
	}
	cfg, err := config.Load(config.RoleVerifier, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in, err := app.Start(ctx, cfg, "verifier-worker", app.NewLogger(testLogOut(t), "verifier-worker"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- in.Run(ctx, verifyworker.Services(verifyworker.Deps{Pool: in.Pool, NATS: in.NATS, JS: in.JS, Layout: in.Layout,
			Pipe: b.engine, Log: in.Log, Metrics: in.Metrics, Ready: in.Ready}.WithConfig(cfg))...)
	}()
	t.Cleanup(func() {
		pgCut.Restore()
		natsCut.Restore()
		cancel()
		<-done
		in.Close()
	})
	addr := in.OpsAddr()
	waitReadyz(t, addr, http.StatusOK, 10*time.Second)
	wait.For(t, 15*time.Second, "the API to see the worker", func() bool { return b.srv.dispatch.WorkersAlive(context.Background()) })
	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusOK, "")

	// NATS cut: not ready; the API has no worker to ask. Back: ready, and answering again.
	natsCut.Cut()
	waitReadyz(t, addr, http.StatusServiceUnavailable, 5*time.Second)
	natsCut.Restore()
	took := waitReadyz(t, addr, http.StatusOK, recoveryBound)
	start := time.Now()
	for b.verify(key, map[string]string{"email": "ann@acme.test"}).status != http.StatusOK {
		if time.Since(start) > recoveryBound {
			t.Fatal("synchronous verification did not resume after the worker's NATS returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("NATS back: /readyz 200 after %v, sync verify 200 %v later", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	batch := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"ann@acme.test", "nobody@acme.test"}}).want(t, http.StatusOK, "")
	if n := len(batch.body["results"].([]any)); n != 2 {
		t.Fatalf("%d batch results", n)
	}

	// Postgres cut: not ready; a job queued meanwhile waits. Back: ready, and the job finishes.
	pgCut.Cut()
	waitReadyz(t, addr, http.StatusServiceUnavailable, 5*time.Second)
	id := b.verify(key, map[string]string{"email": "bob@acme.test", "webhook_url": "https://hooks.example.com/x"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	time.Sleep(300 * time.Millisecond) // the runner takes the job and fails to store its result
	if st := jobStatus(t, b, key, id); st == "completed" {
		t.Fatalf("job completed while the worker's Postgres was cut")
	}
	pgCut.Restore()
	restored := time.Now()
	took = waitReadyz(t, addr, http.StatusOK, recoveryBound)
	for jobStatus(t, b, key, id) != "completed" {
		if time.Since(restored) > recoveryBound {
			t.Fatalf("job %s not completed %v after the worker's Postgres returned", id, recoveryBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Postgres back: /readyz 200 after %v, job completed after %v", took.Round(time.Millisecond), time.Since(restored).Round(time.Millisecond))

	// The worker's metrics saw that work arrive through its queues: mailvet_queue_lag_seconds
	// has the batch's items and the job (taken at least twice: once while Postgres was cut).
	if n := lagSamples(t, in.Metrics, "verify_items"); n < 2 {
		t.Errorf("queue lag of verify items: %d samples, want at least the batch's 2", n)
	}
	if n := lagSamples(t, in.Metrics, "jobs"); n < 2 {
		t.Errorf("queue lag of jobs: %d samples, want at least 2", n)
	}
}

// lagSamples is the number of mailvet_queue_lag_seconds observations of consumer in reg.
func lagSamples(t testing.TB, reg *prometheus.Registry, consumer string) uint64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "mailvet_queue_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// jobStatus is an asynchronous job's status, read through the API.
func jobStatus(t testing.TB, b *verifyBundle, key, id string) string {
	t.Helper()
	r := b.call(http.MethodGet, "/v1/email/jobs/"+id, key, nil).want(t, http.StatusOK, "")
	st, _ := r.body["status"].(string)
	return st
}
