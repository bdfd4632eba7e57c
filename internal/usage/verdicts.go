package usage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/mailvet/mailvet/internal/loop"
)

// Verdict fills in the outcome of a usage row that Admit wrote before the worker fleet answered.
type Verdict struct {
	ItemKey     string
	Status      string
	FailedCheck string
	Snapshot    []byte // JSON
}

// Verdicts writes verdicts behind the responses they belong to, many per statement.
//
// Why: a synchronous verify of an address the worker fleet checks makes its usage row durable in
// the admission statement, before the fleet is asked, because the row's metering facts (account,
// key, route, domain, billable, quota unit) are known by then. Only the verdict columns wait for
// the answer, and a second synchronous commit for them would cost each request a Postgres round
// trip after an idle wait. So they are queued here and written by one goroutine. A crash loses
// at most the queued verdicts, never a row or a count; Close writes what is queued.
type Verdicts struct {
	db  DB
	log *slog.Logger

	once    sync.Once
	started bool         // set in once
	mu      sync.RWMutex // held for reading by Add, for writing by Close
	shut    bool
	in      chan Verdict
	done    chan struct{}
}

const (
	verdictQueue = 4096 // Add blocks beyond this: back-pressure, never loss
	verdictBatch = 512  // verdicts per statement
	// verdictPatience bounds the retries of one batch while Postgres is unreachable; the batch is
	// then logged as lost (its rows and counts are already durable).
	verdictPatience = 30 * time.Second
)

// NewVerdicts returns a writer; its goroutine starts with the first Add.
func NewVerdicts(db DB, log *slog.Logger) *Verdicts {
	return &Verdicts{db: db, log: log, in: make(chan Verdict, verdictQueue), done: make(chan struct{})}
}

// Add queues v. It blocks only while the queue is full; after Close it writes v itself.
func (w *Verdicts) Add(v Verdict) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.shut {
		w.write(context.Background(), []Verdict{v})
		return
	}
	w.once.Do(func() { w.started = true; go w.run() })
	w.in <- v
}

// Close writes every queued verdict and stops the writer.
func (w *Verdicts) Close() {
	if started, first := closeQueue(&w.mu, &w.shut, &w.started, w.in); first && started {
		<-w.done
	}
}

// closeQueue shuts a writer's queue, once: under mu it marks the writer shut and closes in, so
// that Add no longer queues. first is false when it was shut already; started says whether the
// writer's goroutine runs (and will close its done channel once the queue is written).
func closeQueue[T any](mu sync.Locker, shut, started *bool, in chan T) (wasStarted, first bool) {
	mu.Lock()
	defer mu.Unlock()
	if *shut {
		return *started, false
	}
	*shut = true
	close(in)
	return *started, true
}

func (w *Verdicts) run() {
	defer close(w.done)
	batch := make([]Verdict, 0, verdictBatch)
	for v := range w.in {
		batch = loop.Gather(append(batch[:0], v), w.in, verdictBatch)
		w.write(context.Background(), batch)
	}
}

// write applies batch, retrying with backoff while Postgres fails, for verdictPatience at most.
func (w *Verdicts) write(ctx context.Context, batch []Verdict) {
	keys, statuses, checks, snaps := make([]string, len(batch)), make([]*string, len(batch)),
		make([]*string, len(batch)), make([]*string, len(batch))
	for i, v := range batch {
		keys[i], statuses[i], checks[i], snaps[i] = v.ItemKey, nullable(v.Status), nullable(v.FailedCheck), nullableJSON(v.Snapshot)
	}
	op := func() error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// Only rows still without a verdict: a verdict is written once.
		_, err := w.db.Exec(c, `UPDATE usage_log u
			SET status = v.status, failed_check = v.failed_check, snapshot = v.snapshot
			FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[]) AS v(item_key, status, failed_check, snapshot)
			WHERE u.item_key = v.item_key AND u.status IS NULL`, keys, statuses, checks, snaps)
		return err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxElapsedTime = 50*time.Millisecond, verdictPatience
	if err := backoff.Retry(op, backoff.WithContext(b, ctx)); err != nil {
		w.log.Error("usage verdicts lost (their rows and counts are recorded)", "count", len(batch), "err", err)
	}
}
