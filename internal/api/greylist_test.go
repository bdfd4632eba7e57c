package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// A greylisted async job is re-probed (JetStream delayed redelivery) and is retrying meanwhile;
// the callback carries the real verdict, and the job is billed and called back once. A domain
// that never lets us in completes as unknown/greylisted once the window is over. Sync answers
// never wait.
func TestAsyncJobGreylisting(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	mx := []mailsim.MX{{Pref: 10, Host: "mx.acme.test"}}
	b.mail.AddDomain("grey.test", mailsim.Domain{MX: mx, Users: []string{"gil"}, GreylistFor: 100 * time.Millisecond})
	b.mail.AddDomain("wall.test", mailsim.Domain{MX: mx, Users: []string{"wes"}, All: &mailsim.ReplyGreylisted})
	startGreylistVerifier(t, b, 1500*time.Millisecond, 200*time.Millisecond)
	acct, key := b.customer(plan.Builder)

	sync := b.verify(key, map[string]string{"email": "wes@wall.test"}).want(t, http.StatusOK, "").body
	if sync["status"] != "unknown" || sync["reason"] != "greylisted" || replyCode(sync) != 450 {
		t.Fatalf("sync answer %v", sync)
	}

	async := func(email string) string {
		r := b.verify(key, map[string]string{"email": email, "webhook_url": "https://hooks.example.com/mailvet"}).
			want(t, http.StatusAccepted, "")
		return r.body["job_id"].(string)
	}
	grey, wall := async("gil@grey.test"), async("wes@wall.test")

	// poll returns the job once it is completed; it records whether it was ever seen retrying
	// with a next attempt.
	poll := func(id string) (job map[string]any, sawRetrying bool) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			job = b.call(http.MethodGet, "/v1/email/jobs/"+id, key, nil).want(t, 200, "").body
			if job["status"] == "retrying" {
				if at, _ := job["next_attempt_at"].(string); at != "" {
					sawRetrying = true
				} else {
					t.Errorf("retrying job without next_attempt_at: %v", job)
				}
			} else if job["next_attempt_at"] != nil {
				t.Errorf("next_attempt_at outside retrying: %v", job)
			}
			if job["status"] == "completed" || job["status"] == "failed" || time.Now().After(deadline) {
				return job, sawRetrying
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// code is the smtp_reply the final verdict was decided on: the last probe's, in the job's
	// result and in its callback alike.
	check := func(id string, status, reason string, code int, minRetries int, minLatency time.Duration) {
		t.Helper()
		job, sawRetrying := poll(id)
		res, _ := job["result"].(map[string]any)
		if job["status"] != "completed" || res["status"] != status || res["reason"] != reason || replyCode(res) != code {
			t.Fatalf("job %s: %v", id, job)
		}
		// latency_ms counts from the 202, re-probes included, not only the last probe.
		if ms, _ := res["latency_ms"].(float64); ms < float64(minLatency.Milliseconds()) {
			t.Errorf("job %s: latency_ms %v, want at least %v", id, ms, minLatency)
		}
		if !sawRetrying {
			t.Errorf("job %s never seen retrying", id)
		}
		// One callback, with the final verdict, and one usage row.
		var n int
		var body []byte
		pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT count(*), min(body::text)::bytea FROM deliveries WHERE job_id = $1`, id).Scan(&n, &body), "deliveries")
		var cb map[string]any
		_ = json.Unmarshal(body, &cb)
		if n != 1 || cb["status"] != status || cb["reason"] != reason || cb["job_id"] != id || replyCode(cb) != code {
			t.Errorf("job %s: %d deliveries, callback %s", id, n, body)
		}
		if n := b.rows(acct, func(r usagetest.Row) bool { return r.ItemKey == "job:"+id }); n != 1 {
			t.Errorf("job %s: %d usage rows, want 1", id, n)
		}
		var retries int
		pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT retries FROM jobs WHERE id = $1`, id).Scan(&retries), "retries")
		if retries < minRetries {
			t.Errorf("job %s: %d re-probes, want at least %d", id, retries, minRetries)
		}
	}
	check(grey, "deliverable", "accepted", 250, 1, 200*time.Millisecond)
	// 200 ms, 400 ms, then what is left of the 1.5 s window: three re-probes, then unknown.
	check(wall, "unknown", "greylisted", 450, 3, 1500*time.Millisecond)
}

// replyCode is the code of a result's smtp_reply, 0 when it is null or missing.
func replyCode(result map[string]any) int {
	rep, _ := result["smtp_reply"].(map[string]any)
	code, _ := rep["code"].(float64)
	return int(code)
}

// startGreylistVerifier runs a verifier worker like startVerifier, with a greylisting window and
// a first re-probe delay short enough for a test.
func startGreylistVerifier(t *testing.T, b *verifyBundle, window, delay time.Duration) {
	t.Helper()
	nc, err := nats.Connect(b.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range verifyworker.Services(verifyworker.Deps{Pool: b.pool, NATS: nc, JS: js, Pipe: b.engine,
		Log: app.NewLogger(io.Discard, "worker"), GreylistWindow: window, GreylistDelay: delay}) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !b.srv.dispatch.WorkersAlive(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatal("verifier worker did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
