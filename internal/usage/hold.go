package usage

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Ledger admits the API's requests and bills what they deliver. Each admitted request gets a
// Hold: the handler hands it the rows of the results that reached the client (Deliver) and
// defers its Close, which releases what the request did not deliver. Neither waits for Postgres:
// the ledger writes the rows and the releases behind the responses, one statement for up to
// billBatch holds (sql/bill.sql), in the order they were handed over, so a hold's rows are
// always billed before it is released.
//
// A replica that dies loses what it had not written yet: its holds expire (Request.Lifetime) and
// the sweep gives their units back (Expire). The results it delivered but had not billed are
// not billed, in the customer's favour (docs/reliability.md, "Metering guarantees").
type Ledger struct {
	db  DB
	log *slog.Logger
	// group, when set, admits requests in groups (Admitter) instead of one statement each.
	group *Admitter

	mu        sync.Mutex
	queue     []bill
	dropped   int  // bills dropped on a full queue, not logged yet
	running   bool // the writer goroutine runs
	closed    bool // Close ran: bills are written at once, on the caller's path
	abandoned bool // Abandon ran: nothing is written any more
	idle      *sync.Cond
}

// bill is one hand-over to the writer: rows delivered against a hold, or its release.
type bill struct {
	hold    uuid.UUID
	account string
	rows    []Row
	release bool
}

const (
	// billQueue bounds the bills waiting to be written. Beyond it a bill is dropped and logged:
	// its rows go unbilled and its hold expires, never the other way round.
	billQueue = 1 << 16
	// billBatch bounds the holds of one transaction, and so how long its row locks are held.
	billBatch = 256
	// billAttempt bounds one transaction; billPatience the retries of one batch while Postgres
	// fails. A batch still failing after it is dropped and logged: its holds expire.
	billAttempt  = 5 * time.Second
	billPatience = time.Minute
)

// NewLedger returns a ledger on db that admits each request alone (Admit).
func NewLedger(db DB, log *slog.Logger) *Ledger {
	l := &Ledger{db: db, log: log}
	l.idle = sync.NewCond(&l.mu)
	return l
}

// NewGroupedLedger returns a ledger on db that admits requests in groups collected for up to
// window (Admitter); a window of zero admits each alone, as NewLedger's does.
func NewGroupedLedger(db BatchDB, log *slog.Logger, window time.Duration) *Ledger {
	l := NewLedger(db, log)
	l.group = NewAdmitter(db, window, l.release)
	return l
}

// Hold is the room one admitted request holds until it ends. It is safe for concurrent use.
type Hold struct {
	ledger  *Ledger
	id      uuid.UUID
	account string
	once    sync.Once
}

// ID is the hold's id: an asynchronous job takes it as its own (Adopt).
func (h *Hold) ID() uuid.UUID { return h.id }

// Deliver bills the rows of results that reached the client, behind the response.
func (h *Hold) Deliver(rows ...Row) {
	if len(rows) > 0 {
		h.ledger.add(bill{hold: h.id, account: h.account, rows: rows})
	}
}

// Close releases what the request did not deliver, behind the response. Only the first call
// counts; a hold adopted by a job must not be closed.
func (h *Hold) Close() {
	h.once.Do(func() { h.ledger.release(h.account, h.id) })
}

// Admit runs admission (Admit, or the ledger's Admitter) and returns the request's hold. On
// refusal or failure the hold is nil and nothing is owed: a hold that a failed statement may
// still have committed expires after its lifetime.
func (l *Ledger) Admit(ctx context.Context, r Request) (*Hold, Decision, error) {
	if r.Hold == uuid.Nil {
		r.Hold = uuid.New()
	}
	var (
		d   Decision
		err error
	)
	if l.group != nil {
		d, err = l.group.Admit(ctx, r)
	} else {
		d, err = Admit(ctx, l.db, r)
	}
	if err != nil {
		return nil, d, err
	}
	return &Hold{ledger: l, id: d.Hold, account: r.AccountID}, d, nil
}

func (l *Ledger) release(account string, id uuid.UUID) {
	l.add(bill{hold: id, account: account, release: true})
}

// add hands b to the writer, or writes it at once after Close.
func (l *Ledger) add(b bill) {
	l.mu.Lock()
	switch {
	case l.abandoned:
		l.mu.Unlock()
		return
	case l.closed:
		l.mu.Unlock()
		l.write([]bill{b})
		return
	case len(l.queue) >= billQueue:
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.queue = append(l.queue, b)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
}

// run writes the queue, a batch per statement, until it is empty.
func (l *Ledger) run() {
	for {
		l.mu.Lock()
		if dropped := l.dropped; dropped > 0 {
			l.dropped = 0
			l.log.Error("usage: bill queue full; these hand-overs were dropped (their rows go unbilled, their holds expire)", "bills", dropped)
		}
		if len(l.queue) == 0 || l.abandoned {
			l.queue = nil
			l.running = false
			l.idle.Broadcast()
			l.mu.Unlock()
			return
		}
		batch := takeBatch(&l.queue)
		l.mu.Unlock()
		l.write(batch)
	}
}

// takeBatch takes bills of at most billBatch holds off the front of queue.
func takeBatch(queue *[]bill) []bill {
	holds := map[uuid.UUID]bool{}
	n := 0
	for n < len(*queue) {
		h := (*queue)[n].hold
		if !holds[h] && len(holds) == billBatch {
			break
		}
		holds[h] = true
		n++
	}
	batch := (*queue)[:n:n]
	*queue = (*queue)[n:]
	return batch
}

// merge folds the bills of each hold into one, in order of arrival, and sorts them by account
// (the statement takes its locks in account order too).
func merge(batch []bill) []bill {
	at := map[uuid.UUID]int{}
	var out []bill
	for _, b := range batch {
		i, ok := at[b.hold]
		if !ok {
			at[b.hold] = len(out)
			out = append(out, bill{hold: b.hold, account: b.account})
			i = len(out) - 1
		}
		out[i].rows = append(out[i].rows, b.rows...)
		out[i].release = out[i].release || b.release
	}
	slices.SortStableFunc(out, func(x, y bill) int { return strings.Compare(x.account, y.account) })
	return out
}

// write bills batch in one statement, retrying with backoff while Postgres fails, for
// billPatience at most. A batch that Postgres refuses (not a failure of the connection) is
// written hold by hold, so that one bad hold does not hold up the rest; that one is dropped and
// logged.
func (l *Ledger) write(batch []bill) {
	holds := merge(batch)
	try := func() error {
		l.mu.Lock()
		abandoned := l.abandoned
		l.mu.Unlock()
		if abandoned {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), billAttempt)
		defer cancel()
		return l.send(ctx, holds)
	}
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 50*time.Millisecond, 5*time.Second, billPatience
	err := backoff.Retry(func() error {
		err := try()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "40P01" && pgErr.Code != "40001" {
			return backoff.Permanent(err)
		}
		return err
	}, policy)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(holds) > 1 {
		for _, h := range holds {
			l.write([]bill{h})
		}
		return
	}
	if err != nil {
		rows := 0
		for _, h := range holds {
			rows += len(h.rows)
		}
		l.log.Error("usage: bills not written (their rows go unbilled, their holds expire)", "holds", len(holds), "rows", rows, "err", err)
	}
}

// send bills the holds in one statement (sql/bill.sql).
func (l *Ledger) send(ctx context.Context, holds []bill) error {
	_, err := l.db.Exec(ctx, billSQL, billArgs(holds)...)
	return err
}

// Flush waits until everything handed over before the call is written or dropped. Tests use it
// before they read the usage counts.
func (l *Ledger) Flush() {
	l.mu.Lock()
	for l.running {
		l.idle.Wait()
	}
	l.mu.Unlock()
}

// Close waits for the groups in flight and writes what is queued; what is handed over later is
// written at once. Call it once nothing admits any more.
func (l *Ledger) Close() {
	if l.group != nil {
		l.group.Close()
	}
	l.Flush()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// Abandon makes the ledger behave as if its process had been killed: what is queued is lost and
// nothing more is written. The fault tests use it; a real server calls Close.
func (l *Ledger) Abandon() {
	l.mu.Lock()
	l.abandoned = true
	l.queue = nil
	l.mu.Unlock()
}
