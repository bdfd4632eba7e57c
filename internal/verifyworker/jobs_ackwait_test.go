package verifyworker

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

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

// TestJobNotRedeliveredWhileWorked: a runner of one slot busy with a job (0.9 s) holds the next
// job it has taken until the slot frees, then works on it (0.9 s): 1.8 s in all, longer than
// AckWait (1 s), although each job alone is shorter. The runner keeps the job it holds alive
// (InProgress), so JetStream does not hand it to the idle runner next to it meanwhile, and no
// address is probed twice (docs/architecture.md, "Consumers").
func TestJobNotRedeliveredWhileWorked(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")
	jobs := job.NewStore(pool)

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
