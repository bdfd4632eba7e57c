package verifyworker

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/verdict"
)

// slowPipeline takes took for every address, counts the probes per address and says when it
// starts its first.
type slowPipeline struct {
	took    time.Duration
	started chan struct{}
	mu      sync.Mutex
	calls   map[string]int
}

func (p *slowPipeline) Verify(_ context.Context, email string) verdict.Result {
	p.mu.Lock()
	p.calls[email]++
	p.mu.Unlock()
	select {
	case p.started <- struct{}{}:
	default:
	}
	time.Sleep(p.took)
	r := verdict.Result{Email: email}
	r.Apply(verdict.OutcomeDeliverable)
	return r
}

func (p *slowPipeline) VerifyBatch(context.Context, []string, func(int, verdict.Result)) []verdict.Result {
	panic("not used")
}

// jobWorld is a database and a broker for a job runner, with a free account and the job store.
func jobWorld(t *testing.T) (*pgxpool.Pool, jetstream.JetStream, account.Account, *job.Store) {
	t.Helper()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	acct, err := account.NewStore(pool).Create(context.Background(), account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")
	return pool, js, acct, job.NewStore(pool)
}

// TestJobNotRedeliveredWhileWorked: a runner of one slot busy with a job (0.9 s) holds the next
// job it has taken until the slot frees, then works on it (0.9 s): 1.8 s in all, longer than
// AckWait (1 s), although each job alone is shorter. The runner keeps the job it holds alive
// (InProgress), so JetStream does not hand it to the idle runner next to it meanwhile, and no
// address is probed twice (docs/architecture.md, "Consumers").
func TestJobNotRedeliveredWhileWorked(t *testing.T) {
	t.Parallel()
	pool, js, acct, jobs := jobWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pipe := &slowPipeline{took: 900 * time.Millisecond, started: make(chan struct{}, 1), calls: map[string]int{}}
	var ids []uuid.UUID
	for _, e := range []string{"a@example.com", "b@example.com"} {
		id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: e, WebhookURL: "https://hooks.example.com/x"})
		pgtest.Must(t, err, "create job")
		if err := queue.PublishJob(ctx, js, queue.Layout{}, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	run := func() {
		r := NewJobRunner(pool, js, pipe, app.NewLogger(io.Discard, "test"))
		r.Concurrency, r.AckWait = 1, time.Second
		r.SweepEvery, r.SweepAge = time.Hour, time.Hour
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	run()
	select {
	case <-pipe.started:
	case <-ctx.Done():
		t.Fatal("no job started")
	}
	time.Sleep(100 * time.Millisecond) // the first runner has taken the second job by now
	run()                              // idle: where a redelivered job would go

	for _, id := range ids {
		for {
			j, err := jobs.Get(ctx, id, acct.ID)
			pgtest.Must(t, err, "get job")
			if j.State == job.Completed {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("job %s still %s", id, j.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(1500 * time.Millisecond) // a redelivery after the last completion would show here
	pipe.mu.Lock()
	defer pipe.mu.Unlock()
	for e, n := range pipe.calls {
		if n != 1 {
			t.Errorf("%s probed %d times, want once", e, n)
		}
	}
}

// budgetJobPipeline answers only when its context ends, as the prober does facing a mail server
// that never answers: the address comes back unknown/timeout, using the job's whole budget.
type budgetJobPipeline struct{ calls atomic.Int64 }

func (p *budgetJobPipeline) Verify(ctx context.Context, email string) verdict.Result {
	p.calls.Add(1)
	<-ctx.Done()
	r := verdict.Result{Email: email}
	r.Apply(verdict.OutcomeUnknown)
	return r
}

func (p *budgetJobPipeline) VerifyBatch(context.Context, []string, func(int, verdict.Result)) []verdict.Result {
	panic("not used")
}

// TestJobThatUsesItsWholeBudgetIsStillWritten: a job whose verification takes all of its budget
// still has its result, usage row and delivery written, on a clock of their own, and completes
// after one probe, instead of failing its write with the spent context, coming back and failing
// the same way for ever.
func TestJobThatUsesItsWholeBudgetIsStillWritten(t *testing.T) {
	t.Parallel()
	pool, js, acct, jobs := jobWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "tarpit@example.com", WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	if err := queue.PublishJob(ctx, js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}
	pipe := &budgetJobPipeline{}
	r := NewJobRunner(pool, js, pipe, app.NewLogger(io.Discard, "test"))
	r.AckWait = 500 * time.Millisecond
	r.SweepEvery, r.SweepAge = time.Hour, time.Hour
	runJobs(t, ctx, r)

	deadline := time.Now().Add(5 * time.Second)
	for {
		j, err := jobs.Get(ctx, id, acct.ID)
		pgtest.Must(t, err, "get job")
		if j.State == job.Completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s after %d probes", j.State, pipe.calls.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := pipe.calls.Load(); n != 1 {
		t.Errorf("probed %d times, want once", n)
	}
}

// TestJobRepublishedAfterTheDuplicateWindowIsNotRunAgain: a job's message published again after
// its job completed, under an id the stream's duplicate window no longer knows (a sweep's round,
// or any publish later than 2 minutes), is stored, taken and acknowledged without a second probe
// or a second delivery: completing a job is guarded by its state.
func TestJobRepublishedAfterTheDuplicateWindowIsNotRunAgain(t *testing.T) {
	t.Parallel()
	pool, js, acct, jobs := jobWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	if err := queue.PublishJob(ctx, js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}
	pipe := &slowPipeline{started: make(chan struct{}, 1), calls: map[string]int{}}
	r := NewJobRunner(pool, js, pipe, app.NewLogger(io.Discard, "test"))
	r.SweepEvery, r.SweepAge = time.Hour, time.Hour
	runJobs(t, ctx, r)
	completed := func() bool {
		j, err := jobs.Get(ctx, id, acct.ID)
		pgtest.Must(t, err, "get job")
		return j.State == job.Completed
	}
	for !completed() {
		if ctx.Err() != nil {
			t.Fatal("the job did not complete")
		}
		time.Sleep(20 * time.Millisecond)
	}

	msgs := streamMsgs(t, ctx, js, queue.StreamJobs)
	if err := queue.RequeueJob(ctx, js, queue.Layout{}, id, "later"); err != nil {
		t.Fatal(err)
	}
	for msgs() != 0 { // taken and acknowledged
		if ctx.Err() != nil {
			t.Fatal("the republished message was not acknowledged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pipe.mu.Lock()
	probes := pipe.calls["ann@example.com"]
	pipe.mu.Unlock()
	var deliveries int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE job_id = $1`, id).Scan(&deliveries), "deliveries")
	if probes != 1 || deliveries != 1 {
		t.Errorf("after the republish: %d probes, %d deliveries; want 1 each", probes, deliveries)
	}
}
