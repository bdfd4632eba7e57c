package verifyworker

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verdict"
)

// brokenPipeline answers every address with the result broken makes of a deliverable one, and
// counts its probes: an engine defect that comes back the same on every attempt.
type brokenPipeline struct {
	broken func(*verdict.Result)
	calls  atomic.Int64
}

func (p *brokenPipeline) Verify(_ context.Context, email string) verdict.Result {
	p.calls.Add(1)
	r := verdict.Result{Email: email}
	r.Apply(verdict.OutcomeDeliverable)
	p.broken(&r)
	return r
}

func (p *brokenPipeline) VerifyBatch(context.Context, []string, func(int, verdict.Result)) []verdict.Result {
	panic("not used")
}

// heldJob stores a job of acct as the API does (docs/architecture.md, "Metering and admission"):
// its request's hold, adopted by the job of the same id, and its message queued.
func heldJob(t *testing.T, ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, acct account.Account, email string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := usage.Admit(ctx, pool, usage.Request{AccountID: acct.ID, Free: true, Units: 1, RatePerMin: 100,
		MonthlyCalls: 500, Now: time.Now(), Hold: id})
	pgtest.Must(t, err, "admit")
	pgtest.Must(t, usage.Adopt(ctx, pool, id), "adopt")
	_, err = job.NewStore(pool).Create(ctx, job.New{ID: id, AccountID: acct.ID, Email: email, WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	if err := queue.PublishJob(ctx, js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestJobPoisonFailsTheJobOnce: a job whose every attempt fails the same way, for a reason that
// is not an outage — here a result the runner cannot store or cannot encode — is tried
// MaxFailures times and then fails, once: its callback says "internal" without the cause's text,
// nothing is billed or counted against the quota, its hold is released, and its message is gone
// (docs/reliability.md, "Asynchronous jobs that keep failing"). Each failed attempt is counted in
// mailvet_job_attempt_failures_total by what followed (docs/operations.md). The list runner does
// the same for a chunk (TestListPoisonChunkFailsTheListOnce).
func TestJobPoisonFailsTheJobOnce(t *testing.T) {
	t.Parallel()
	const maxFailures = 3
	for _, tc := range []struct {
		name   string
		broken func(*verdict.Result)
		probes int    // attempts before the job fails
		class  string // the job's error class
		// retried and failed: the failed attempts counted as tried again, and as failing the job.
		retried, failed float64
	}{
		// jsonb refuses \u0000: Postgres refuses the job's result on every attempt.
		{"unstorable", func(r *verdict.Result) { host := "mx\x00.example"; r.MXHost = &host }, maxFailures, job.ErrorRepeatedFailure, maxFailures - 1, 1},
		// encoding/json refuses NaN: the callback body cannot be made.
		{"unencodable", func(r *verdict.Result) { r.Confidence = math.NaN() }, maxFailures, job.ErrorRepeatedFailure, maxFailures - 1, 1},
		// The engine panics: verification itself failed, and the job fails at its first attempt,
		// which is its outcome, not a failed attempt.
		{"verification fails", func(*verdict.Result) { panic("the engine cannot handle it") }, 1, "errors.errorString", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, js, acct, jobs := jobWorld(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := heldJob(t, ctx, pool, js, acct, "ann@example.com")
			pipe := &brokenPipeline{broken: tc.broken}
			r := NewJobRunner(pool, js, pipe, app.NewLogger(io.Discard, "test"))
			r.SweepEvery, r.SweepAge = time.Hour, time.Hour
			r.MaxFailures, r.FailureRetry, r.OutageRetry = maxFailures, 20*time.Millisecond, 20*time.Millisecond
			r.failures = jobAttempts(prometheus.NewRegistry())
			runJobs(t, ctx, r)

			deadline := time.Now().Add(10 * time.Second)
			var j job.Job
			for {
				var err error
				j, err = jobs.Get(ctx, id, acct.ID)
				pgtest.Must(t, err, "get job")
				if j.State == job.Failed || j.State == job.Completed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job still %s after %d probes, want failed after %d", j.State, pipe.calls.Load(), tc.probes)
				}
				time.Sleep(20 * time.Millisecond)
			}
			ConsumerSettled(t, js, queue.StreamJobs, queue.ConsumerJobRunners, 10*time.Second)
			time.Sleep(200 * time.Millisecond) // a further attempt would show here
			if j.State != job.Failed {
				t.Fatalf("job %s, want failed", j.State)
			}
			if n := pipe.calls.Load(); n != int64(tc.probes) {
				t.Errorf("probed %d times, want %d", n, tc.probes)
			}
			var body map[string]any
			pgtest.Must(t, json.Unmarshal(j.Result, &body), "result")
			if body["error"] != "internal" || body["reason"] != "internal" || body["status"] != "unknown" ||
				body["email"] != "ann@example.com" || body["job_id"] != id.String() || body["mx_host"] != nil {
				t.Errorf("result %s, want the failed job's body (docs/api.md, \"The callback request\")", j.Result)
			}
			var deliveries int
			var delivered string
			pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(convert_from(body, 'UTF8'), ','), '') FROM deliveries WHERE job_id = $1`, id).Scan(&deliveries, &delivered), "deliveries")
			if deliveries != 1 || !strings.Contains(delivered, `"error":"internal"`) {
				t.Errorf("%d callbacks (%s), want one saying internal", deliveries, delivered)
			}
			c := usagetest.Of(t, pool, acct.ID)
			if c.Billable != 0 || c.Quota != 0 || c.Held != 0 || c.Holds != 0 {
				t.Errorf("billable %d, quota units %d, held %d in %d holds; want nothing charged and the hold released",
					c.Billable, c.Quota, c.Held, c.Holds)
			}
			var class *string
			pgtest.Must(t, pool.QueryRow(ctx, `SELECT error_class FROM jobs WHERE id = $1`, id).Scan(&class), "error class")
			if class == nil || *class != tc.class {
				t.Errorf("error class %v, want %q", class, tc.class)
			}
			for outcome, want := range map[string]float64{attemptRetry: tc.retried, attemptFailed: tc.failed, attemptOutage: 0} {
				if got := testutil.ToFloat64(r.failures.vec.WithLabelValues(outcome)); got != want {
					t.Errorf("mailvet_job_attempt_failures_total{outcome=%q} = %v, want %v", outcome, got, want)
				}
			}
		})
	}
}

// jobDeliveries is how many job messages the job runners' consumer has delivered so far.
func jobDeliveries(t *testing.T, ctx context.Context, js jetstream.JetStream) uint64 {
	t.Helper()
	c, err := js.Consumer(ctx, queue.StreamJobs, queue.ConsumerJobRunners)
	if err != nil {
		return 0 // not created yet
	}
	info, err := c.Info(ctx)
	pgtest.Must(t, err, "consumer info")
	return info.Delivered.Consumer
}

// TestJobWaitsOutAPostgresOutage: a job whose runner cannot reach Postgres for many more
// deliveries than MaxFailures keeps coming back, and completes once Postgres returns, billed
// once — an outage is not a failure of the job (docs/reliability.md, "Asynchronous jobs that keep
// failing"). Its attempts are counted as outages in mailvet_job_attempt_failures_total.
func TestJobWaitsOutAPostgresOutage(t *testing.T) {
	t.Parallel()
	pool, js, acct, jobs := jobWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proxied, proxy := pgtest.Proxied(t, pool.Config().ConnString())
	cut := pgtest.Pool(t, proxied)
	id := heldJob(t, ctx, pool, js, acct, "ann@example.com")

	proxy.Cut()
	pipe := &slowPipeline{started: make(chan struct{}, 1), calls: map[string]int{}}
	r := NewJobRunner(cut, js, pipe, app.NewLogger(io.Discard, "test"))
	r.SweepEvery, r.SweepAge = time.Hour, time.Hour
	r.MaxFailures, r.OutageRetry, r.WriteBudget = 1, 20*time.Millisecond, time.Second
	r.failures = jobAttempts(prometheus.NewRegistry())
	runJobs(t, ctx, r)

	for jobDeliveries(t, ctx, js) < 5 {
		if ctx.Err() != nil {
			t.Fatal("the job did not come back during the outage")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j, err := jobs.Get(ctx, id, acct.ID); err != nil || j.State != job.Pending {
		t.Fatalf("during the outage: job %s, %v; want still pending", j.State, err)
	}
	// Every delivery but the one in hand has failed on the outage by now.
	if got := testutil.ToFloat64(r.failures.vec.WithLabelValues(attemptOutage)); got < 4 {
		t.Errorf("mailvet_job_attempt_failures_total{outcome=\"outage\"} = %v after 5 deliveries in the outage, want at least 4", got)
	}
	proxy.Restore()

	for {
		j, err := jobs.Get(ctx, id, acct.ID)
		pgtest.Must(t, err, "get job")
		if j.State == job.Completed {
			break
		}
		if j.State == job.Failed || ctx.Err() != nil {
			t.Fatalf("job %s after the outage, want completed", j.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := usagetest.Of(t, pool, acct.ID)
	if c.Billable != 1 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("billable %d, held %d in %d holds; want the job billed once and its hold released", c.Billable, c.Held, c.Holds)
	}
	for _, outcome := range []string{attemptRetry, attemptFailed} {
		if got := testutil.ToFloat64(r.failures.vec.WithLabelValues(outcome)); got != 0 {
			t.Errorf("mailvet_job_attempt_failures_total{outcome=%q} = %v, want 0: an outage is not counted as the job's failure", outcome, got)
		}
	}
}

// runJobs runs r until ctx ends or the test does, and waits for it to stop when the test ends.
func runJobs(t *testing.T, ctx context.Context, r *JobRunner) {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}
