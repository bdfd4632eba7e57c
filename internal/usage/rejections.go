package usage

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/loop"
)

// Rejections writes the usage-log rows of refused verify requests behind their responses.
//
// Why: such a row is informational (it never counts toward the quota or billing), and the
// commonest reason to refuse a request is that the datastore is failing, so writing the row on
// the request's path would add a second datastore timeout to the error response: a 503 meant to
// arrive within two seconds would take three or more. Rows are queued here instead and written,
// many per statement, by one goroutine. The queue is bounded: when it is full, or the datastore
// stays unreachable for rejectionPatience, rows are dropped, logged and counted (Dropped), never
// allowed to hold up a response or grow memory.
type Rejections struct {
	db  DB
	log *slog.Logger
	in  chan Row

	// ctx ends the writer's retries; Close cancels it when the queue does not drain in time.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond // signalled when settled grows
	started bool
	shut    bool
	added   uint64 // rows queued
	settled uint64 // queued rows written or dropped

	dropped    atomic.Uint64 // rows dropped since the start
	unreported atomic.Uint64 // dropped on a full queue, not logged yet
}

const (
	rejectionQueue = 1024 // rows waiting; beyond this they are dropped
	rejectionBatch = 256  // rows per statement
	// rejectionAttempt bounds one write; rejectionPatience bounds the retries of one batch.
	rejectionAttempt  = 2 * time.Second
	rejectionPatience = 5 * time.Second
	// rejectionDrain is how long Close waits for the queue to be written before dropping it.
	rejectionDrain = 2 * time.Second
)

// NewRejections returns a writer; its goroutine starts with the first Add.
func NewRejections(db DB, log *slog.Logger) *Rejections {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Rejections{db: db, log: log, in: make(chan Row, rejectionQueue), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// Add queues r and returns at once; r is dropped when the queue is full or the writer closed.
func (w *Rejections) Add(r Row) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		w.drop(1)
		w.log.Warn("usage row of a rejected request dropped: writer closed", "item_key", r.ItemKey)
		return
	}
	if !w.started {
		w.started = true
		go w.run()
	}
	select {
	case w.in <- r:
		w.added++
	default:
		w.drop(1)
		w.unreported.Add(1)
	}
}

// Dropped is how many rows were dropped since the writer was made.
func (w *Rejections) Dropped() uint64 { return w.dropped.Load() }

// Flush waits until every row queued before the call is written or dropped. Tests use it before
// reading the usage log; it can wait up to rejectionPatience per batch while Postgres fails.
func (w *Rejections) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for target := w.added; w.settled < target; {
		w.cond.Wait()
	}
}

// Close writes the queued rows, waiting rejectionDrain at most, and stops the writer.
func (w *Rejections) Close() {
	w.mu.Lock()
	if w.shut {
		w.mu.Unlock()
		return
	}
	w.shut = true
	close(w.in)
	started := w.started
	w.mu.Unlock()
	if started {
		t := time.NewTimer(rejectionDrain)
		select {
		case <-w.done:
		case <-t.C:
			w.cancel() // the remaining rows fail fast and are dropped
			<-w.done
		}
		t.Stop()
	}
	w.cancel()
}

func (w *Rejections) drop(n int) { w.dropped.Add(uint64(n)) }

func (w *Rejections) run() {
	defer close(w.done)
	batch := make([]Row, 0, rejectionBatch)
	for r := range w.in {
		batch = loop.Gather(append(batch[:0], r), w.in, rejectionBatch)
		w.write(batch)
		w.reportDrops()
		w.settle(len(batch))
	}
}

// write records batch, retrying with backoff while Postgres fails, for rejectionPatience at most;
// then the batch is dropped.
func (w *Rejections) write(batch []Row) {
	op := func() error {
		ctx, cancel := context.WithTimeout(w.ctx, rejectionAttempt)
		defer cancel()
		return Bill(ctx, w.db, uuid.Nil, batch, false)
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxElapsedTime(rejectionPatience))
	if err := backoff.Retry(op, backoff.WithContext(b, w.ctx)); err != nil {
		w.drop(len(batch))
		w.log.Warn("usage rows of rejected requests dropped", "count", len(batch), "dropped_total", w.Dropped(), "err", err)
	}
}

// reportDrops logs the rows Add dropped on a full queue since the last report: one line per
// batch written, not one per row, however many requests are refused meanwhile.
func (w *Rejections) reportDrops() {
	if n := w.unreported.Swap(0); n > 0 {
		w.log.Warn("usage rows of rejected requests dropped: queue full", "count", n, "dropped_total", w.Dropped())
	}
}

func (w *Rejections) settle(n int) {
	w.mu.Lock()
	w.settled += uint64(n)
	w.cond.Broadcast()
	w.mu.Unlock()
}
