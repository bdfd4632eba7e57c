package usage

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Holds makes "a result the client did not get is never billed" survive the death of the API
// replica that served the request (docs/api.md, "Metering"; docs/reliability.md, "Usage of a
// replica that died").
//
// A request's usage rows are written before its response (at admission, or by Charge.Record), and
// its Charge withdraws the undelivered ones when the request ends. That refund lives in the
// process: a replica killed mid-request used to leave a batch billed in full, stream lines
// recorded but never written. So every row a Ledger with Holds writes carries the replica's id
// (usage_log.held_by) until the Charge says its result was delivered; the replica then confirms
// it (held_by back to null) in the background, many rows per statement, so that delivery costs no
// commit on the response's path. The replica heartbeats its api_replicas row; every replica
// sweeps the rows still held by replicas whose heartbeat has lapsed and withdraws them, with their
// counts (withdraw).
//
// The sweep also releases the spend-cap reservations of dead replicas (ReleaseStale): a
// reservation is held by its replica as its rows are.
//
// The background work starts with the first row or reservation held, so a server that never
// meters anything (many tests) runs no goroutine.
type Holds struct {
	db    DB
	log   *slog.Logger
	id    string
	grace time.Duration

	once    sync.Once
	started bool // set in once
	stop    chan struct{}
	loops   sync.WaitGroup

	mu        sync.Mutex
	queue     []string // delivered rows not yet confirmed
	dropped   int      // confirmations dropped because the queue was full, not yet logged
	closed    bool     // Close or Abandon ran: confirm writes directly
	abandoned bool
}

// HoldOptions tune Holds; the zero value is the production setting.
type HoldOptions struct {
	// Grace is how long a heartbeat keeps a replica alive: the rows it holds are swept once this
	// much time has passed since its last heartbeat. Zero means DefaultHoldGrace.
	Grace time.Duration
}

const (
	// DefaultHoldGrace outlasts a Postgres failover or a long garbage-collection pause: a live
	// replica misses several heartbeats before its rows are taken for a dead one's.
	DefaultHoldGrace = 30 * time.Second
	// heartbeatsPerGrace: the heartbeat runs this many times per grace period.
	heartbeatsPerGrace = 6
	// confirmEvery is how long a delivered row waits to be confirmed. A replica killed within it
	// loses the row (it is swept although delivered): the error is in the client's favour and
	// bounded by this many milliseconds of traffic.
	confirmEvery = 150 * time.Millisecond
	confirmBatch = 2048    // item keys per confirming statement
	confirmQueue = 1 << 16 // item keys waiting at most; more are dropped (and swept: not billed)
	// sweepEvery is how often each replica sweeps; SKIP LOCKED lets them all do it at once.
	sweepEvery = 10 * time.Second
	sweepBatch = 500 // rows per sweeping transaction
	sweepRuns  = 20  // transactions per sweep, so one sweep is bounded
	// holdTimeout bounds each background statement.
	holdTimeout = 5 * time.Second
	// firstBeatTimeout bounds the first heartbeat, which a request waits for (start): with the
	// request's own admission (database.QueryTimeout, 1 s) it keeps a fresh replica's first
	// request during a Postgres partition within the 2 s in which every route answers 503.
	firstBeatTimeout = 500 * time.Millisecond
	// closePatience bounds the retries of the last confirmations at shutdown.
	closePatience = 5 * time.Second
)

// NewHolds returns the holds of a new replica id on db. Nothing runs until the first row is held.
func NewHolds(db DB, log *slog.Logger, o HoldOptions) *Holds {
	if o.Grace <= 0 {
		o.Grace = DefaultHoldGrace
	}
	return &Holds{db: db, log: log, id: uuid.NewString(), grace: o.Grace, stop: make(chan struct{})}
}

// Replica is the id this replica's rows are held by (usage_log.held_by, api_replicas.id).
func (h *Holds) Replica() string { return h.id }

// start runs the heartbeat, the confirmations and the sweep, once; not after Close. The first
// heartbeat is written before start returns, so before the first row this replica holds: until
// it lands, another replica's sweep would take a row with an occurred_at older than the grace
// for one of a replica that died before its first heartbeat, and withdraw it while its request
// is still running.
//
// That first heartbeat is on the first request's path, so it is bounded like the request's own
// statements (firstBeatTimeout, half of theirs), not like the background ones: on a Postgres that
// stops answering, the first request still gets its 503 within two seconds. If it fails, so does the
// request's write, most likely; the loop's next heartbeat follows a grace/6 later.
func (h *Holds) start() {
	h.once.Do(func() {
		h.started = true
		h.heartbeatWithin(firstBeatTimeout)
		h.loops.Add(3)
		go h.every(h.grace/heartbeatsPerGrace, h.heartbeat)
		go h.every(confirmEvery, h.flush)
		go h.every(sweepEvery, h.sweep)
	})
}

// every runs task every interval until Close or Abandon.
func (h *Holds) every(interval time.Duration, task func()) {
	defer h.loops.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			task()
		}
	}
}

func (h *Holds) heartbeat() { h.heartbeatWithin(holdTimeout) }

func (h *Holds) heartbeatWithin(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Heartbeat(ctx, h.db, h.id, h.grace); err != nil {
		h.log.Warn("usage holds: heartbeat", "replica", h.id, "err", err)
	}
}

func (h *Holds) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), sweepRuns*holdTimeout)
	defer cancel()
	n, err := SweepHeld(ctx, h.db, h.grace)
	if n > 0 {
		h.log.Warn("usage holds: withdrew the undelivered rows of dead replicas", "rows", n)
	}
	if err != nil {
		h.log.Warn("usage holds: sweep", "err", err)
	}
	n, err = ReleaseStale(ctx, h.db, h.grace)
	if n > 0 {
		h.log.Warn("usage holds: released the spend-cap reservations of dead replicas", "reservations", n)
	}
	if err != nil {
		h.log.Warn("usage holds: releasing reservations", "err", err)
	}
}

// confirm queues the confirmation of rows whose results were delivered. It never waits for
// Postgres: the response's path stays free of a second commit.
func (h *Holds) confirm(keys []string) {
	if len(keys) == 0 {
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		if !h.abandoned { // after Close: write them now rather than leave them to the sweep
			ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
			defer cancel()
			if err := ConfirmHeld(ctx, h.db, h.id, keys); err != nil {
				h.log.Error("usage holds: confirm after close", "rows", len(keys), "err", err)
			}
		}
		return
	}
	room := confirmQueue - len(h.queue)
	if room < len(keys) {
		h.dropped += len(keys) - max(0, room)
		keys = keys[:max(0, room)]
	}
	h.queue = append(h.queue, keys...)
	h.mu.Unlock()
}

// flush confirms the queued rows, a batch per statement. A batch that fails goes back to the
// front of the queue for the next tick.
func (h *Holds) flush() {
	for range confirmQueue/confirmBatch + 1 { // bounded: the queue can hold that many batches
		h.mu.Lock()
		if dropped := h.dropped; dropped > 0 {
			h.dropped = 0
			h.log.Error("usage holds: confirmation queue full; these delivered rows will be swept unbilled", "rows", dropped)
		}
		n := min(len(h.queue), confirmBatch)
		batch := slices.Clone(h.queue[:n])
		h.queue = slices.Delete(h.queue, 0, n)
		h.mu.Unlock()
		if n == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
		err := ConfirmHeld(ctx, h.db, h.id, batch)
		cancel()
		if err != nil {
			h.mu.Lock()
			h.queue = append(batch, h.queue...)
			h.mu.Unlock()
			h.log.Warn("usage holds: confirm", "rows", len(batch), "err", err)
			return
		}
	}
}

// Close stops the background work once no request is in flight (after the ledger's refunds):
// it confirms what is queued, retrying for a few seconds, and then marks the replica dead at once,
// so that whatever it still holds (rows whose refund or confirmation could not be written) is
// swept by the other replicas without waiting for the grace period.
func (h *Holds) Close() {
	h.once.Do(func() {}) // never start after Close
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	if !h.started {
		return
	}
	close(h.stop)
	h.loops.Wait()
	deadline := time.Now().Add(closePatience)
	for {
		h.flush()
		h.mu.Lock()
		left := len(h.queue)
		h.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			if left > 0 {
				h.log.Error("usage holds: delivered rows left unconfirmed at shutdown; they will be swept unbilled", "rows", left)
			}
			break
		}
		time.Sleep(confirmEvery)
	}
	ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
	defer cancel()
	if _, err := h.db.Exec(ctx, `UPDATE api_replicas SET alive_until = now() WHERE id = $1`, h.id); err != nil {
		h.log.Warn("usage holds: retire replica", "replica", h.id, "err", err)
	}
}

// Abandon stops the background work at once and writes nothing more: what a replica killed with
// SIGKILL leaves behind (no more heartbeats, the queued confirmations lost). The fault tests use
// it; a real server calls Close.
func (h *Holds) Abandon() {
	h.once.Do(func() {})
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed, h.abandoned = true, true
	h.queue = nil
	h.mu.Unlock()
	if h.started {
		close(h.stop)
		h.loops.Wait()
	}
}

// Heartbeat keeps replica alive for grace from now (the database's clock), registering it on
// its first call.
func Heartbeat(ctx context.Context, db DB, replica string, grace time.Duration) error {
	_, err := db.Exec(ctx, `INSERT INTO api_replicas (id, alive_until) VALUES ($1, now() + $2::interval)
		ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until`, replica, grace)
	return err
}

// ConfirmHeld says the results of these rows of replica were delivered: they are owed for good.
// A row already withdrawn (by the request's refund, or by a sweep that took the replica for
// dead) is not there to confirm, and stays withdrawn.
func ConfirmHeld(ctx context.Context, db DB, replica string, itemKeys []string) error {
	if len(itemKeys) == 0 {
		return nil
	}
	_, err := db.Exec(ctx, `UPDATE usage_log SET held_by = NULL WHERE item_key = ANY($1::text[]) AND held_by = $2`,
		itemKeys, replica)
	return err
}

// heldOfDeadSQL locks (SKIP LOCKED: sweeps on other replicas take other rows) a batch of rows
// held by dead replicas: replicas whose heartbeat has lapsed and, for rows older than the grace,
// replicas with no heartbeat row at all (a replica that died before its first heartbeat landed;
// a younger row may be a live replica's whose first heartbeat is on its way).
const heldOfDeadSQL = `SELECT u.account_id, u.item_key FROM usage_log u
	LEFT JOIN api_replicas r ON r.id = u.held_by
	WHERE u.held_by IS NOT NULL
		AND (r.alive_until < now() OR (r.id IS NULL AND u.occurred_at < now() - $1::interval))
	LIMIT $2
	FOR UPDATE OF u SKIP LOCKED`

// SweepHeld withdraws the rows still held by dead replicas, in bounded batches, through the same
// statement a Charge's refund uses (so the daily and monthly billable counts drop with them), and
// gives back the free tier's quota units those rows took. Then it deletes the heartbeat rows of
// dead replicas that hold nothing any more. Any replica may run it at any time. It returns the
// number of rows withdrawn.
//
// Quota units of emails a dead replica admitted but never wrote a row for (the rest of a stream,
// a batch that died before its results were recorded) cannot be given back: nothing in the
// database says which admission they belonged to.
func SweepHeld(ctx context.Context, db DB, grace time.Duration) (int, error) {
	total := 0
	for range sweepRuns {
		n, err := sweepBatchOf(ctx, db, grace)
		total += n
		if err != nil {
			return total, err
		}
		if n < sweepBatch {
			break
		}
	}
	_, err := db.Exec(ctx, `DELETE FROM api_replicas r WHERE r.alive_until < now() - $1::interval
		AND NOT EXISTS (SELECT 1 FROM usage_log u WHERE u.held_by = r.id)`, grace)
	return total, err
}

// sweepBatchOf withdraws one batch in one transaction, account by account in a fixed order (two
// sweeps lock the counters in the same order).
func sweepBatchOf(ctx context.Context, db DB, grace time.Duration) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, heldOfDeadSQL, grace, sweepBatch)
		if err != nil {
			return err
		}
		byAccount := map[string][]string{}
		for rows.Next() {
			var acct, key string
			if err := rows.Scan(&acct, &key); err != nil {
				rows.Close()
				return err
			}
			byAccount[acct] = append(byAccount[acct], key)
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		accts := make([]string, 0, len(byAccount))
		for a := range byAccount {
			accts = append(accts, a)
		}
		slices.Sort(accts)
		for _, a := range accts {
			if err := withdraw(ctx, tx, a, byAccount[a], returnUnitsOnce); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweep held usage rows: %w", err)
	}
	return n, nil
}
