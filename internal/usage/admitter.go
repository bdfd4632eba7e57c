package usage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/database"
)

// Admitter admits requests in groups: the admission statements of many requests go to Postgres
// in one round trip and are committed together, so a busy replica pays one commit for a group
// instead of one per request (docs/api.md, "Metering").
//
// Each request is still decided exactly as if it were alone. A group is one transaction whose
// statements are Admit's own, run one after the other in the order the requests arrived (per
// account), each seeing the ones before it: the rate limit, the quota and the spend cap cannot
// be overshot, a refusal is the same error with the same fields, and holds are made only for
// admitted requests. A statement that fails (a hold id used already, say) rolls the transaction
// back; that request gets its error and the group is sent again without it, so its group-mates
// are decided as if it had not been there.
//
// Why not wait to fill a group: a request that finds no group in flight is sent at once, so an
// idle replica adds no delay. Otherwise it waits for the next group, which leaves when a slot is
// free and either the window has passed since its first request arrived or it is full.
type Admitter struct {
	db     BatchDB
	window time.Duration
	// release gives back the hold of a request admitted after its caller gave up.
	release func(account string, hold uuid.UUID)

	mu       sync.Mutex
	pending  []*waiter
	inflight int
	timer    *time.Timer
	running  sync.WaitGroup
}

const (
	// groupSlots is how many groups may be in flight at once, each on its own connection. Two
	// keep Postgres busy (one group commits while the next runs) and leave the rest of the pool
	// (pgx's default is four connections on a small machine) to key look-ups and the usage
	// writers.
	groupSlots = 2
	// maxGroup bounds the statements of one transaction, and so how long its row locks are held.
	maxGroup = 64
	// groupRetries bounds how often a group is sent again after a deadlock with another
	// replica's group; nothing of it was committed, so sending it again is safe.
	groupRetries = 2
)

// NewAdmitter returns an admitter on db that collects requests for up to window while a group is
// in flight. A window of zero or less admits every request alone with Admit. release is handed
// the hold of every request that the group admitted after its caller had given up.
func NewAdmitter(db BatchDB, window time.Duration, release func(account string, hold uuid.UUID)) *Admitter {
	return &Admitter{db: db, window: window, release: release}
}

// Close waits for the groups in flight. Call it once nothing admits any more.
func (a *Admitter) Close() { a.running.Wait() }

// waiter is one request waiting for its group. Its fields after adm are guarded by the
// Admitter's mutex until done is closed.
type waiter struct {
	adm  *admission
	at   time.Time // when it arrived
	done chan struct{}
	err  error // the statement's error, when it failed

	sent      bool // taken into a group
	finished  bool // its group delivered the outcome
	abandoned bool // its caller gave up after it was sent
}

// Admit decides r as Admit would, in the next group.
//
// A request whose ctx ends before its group is sent is dropped from the group: nothing is
// charged. One whose ctx ends while its group runs returns at once; if the group then admits it,
// its hold is released. Its rate-limit units stay spent.
func (a *Admitter) Admit(ctx context.Context, r Request) (Decision, error) {
	if a.window <= 0 {
		return Admit(ctx, a.db, r)
	}
	w := &waiter{adm: newAdmission(r), at: time.Now(), done: make(chan struct{})}
	a.mu.Lock()
	a.pending = append(a.pending, w)
	a.flush()
	a.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		a.mu.Lock()
		switch {
		case !w.sent:
			a.pending = slices.DeleteFunc(a.pending, func(p *waiter) bool { return p == w })
			a.mu.Unlock()
			return w.adm.d, notSent{w.adm.failed(ctx.Err())}
		case !w.finished:
			w.abandoned = true
			a.mu.Unlock()
			return w.adm.d, w.adm.failed(ctx.Err())
		}
		a.mu.Unlock() // decided just now: the caller has its outcome, as with Admit
	}
	if w.err != nil {
		return w.adm.d, w.adm.failed(w.err)
	}
	return w.adm.decide(ctx, a.db)
}

// flush sends groups while there are slots and requests ready to go, and otherwise arms the
// window's timer. a.mu is held.
func (a *Admitter) flush() {
	for len(a.pending) > 0 && a.inflight < groupSlots {
		due := a.inflight == 0 || len(a.pending) >= maxGroup || time.Since(a.pending[0].at) >= a.window
		if !due {
			if a.timer == nil {
				a.timer = time.AfterFunc(a.window-time.Since(a.pending[0].at), a.tick)
			}
			return
		}
		n := min(len(a.pending), maxGroup)
		group := slices.Clone(a.pending[:n])
		a.pending = slices.Delete(a.pending, 0, n)
		for _, w := range group {
			w.sent = true
		}
		a.inflight++
		a.running.Add(1)
		go a.run(group)
	}
}

func (a *Admitter) tick() {
	a.mu.Lock()
	a.timer = nil
	a.flush()
	a.mu.Unlock()
}

// run sends one group and delivers the outcome to its requests.
func (a *Admitter) run(group []*waiter) {
	defer a.running.Done()
	// Not any request's context: the group is shared. The deadline is the one every
	// request-path statement has (database.QueryTimeout), so a Postgres that does not answer
	// yields a 503 as quickly as with Admit.
	ctx, cancel := context.WithTimeout(context.Background(), database.QueryTimeout)
	defer cancel()

	// Accounts in one order in every group, so that two groups (on two connections or two
	// replicas) that lock the same accounts' rows do so in the same order and cannot deadlock
	// each other. The sort is stable: one account's requests keep their order of arrival.
	slices.SortStableFunc(group, func(x, y *waiter) int { return strings.Compare(x.adm.r.AccountID, y.adm.r.AccountID) })

	live, retries := group, 0
	var down error // a failure of the whole group, given to every request still in it
	for len(live) > 0 {
		at, err := a.send(ctx, live)
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		switch {
		case at < 0 || ctx.Err() != nil || !errors.As(err, &pgErr) || database.Unreachable(err):
			down = err // not one statement's fault: the connection, the deadline, the server
		case (pgErr.Code == "40P01" || pgErr.Code == "40001") && retries < groupRetries:
			retries++ // a deadlock or serialization failure: nothing was committed, send it again
			continue
		default:
			// This request's own statement failed: it gets the error, the rest go again.
			live[at].err = err
			live = slices.Delete(slices.Clone(live), at, at+1)
			continue
		}
		break
	}
	if down != nil {
		for _, w := range live {
			w.err = down
		}
	}
	a.deliver(group, down)
}

// send runs the admission statements of group in one transaction (a pgx batch is one implicit
// transaction, committed at its end) and scans their answers into the requests. On failure it
// returns the index of the request whose statement failed, or -1 when the group failed as a
// whole; either way nothing of the group was committed.
func (a *Admitter) send(ctx context.Context, group []*waiter) (int, error) {
	b := &pgx.Batch{}
	for _, w := range group {
		b.Queue(admitSQL, w.adm.args...)
	}
	br := a.db.SendBatch(ctx, b)
	for i, w := range group {
		if err := w.adm.scan(br.QueryRow()); err != nil {
			_ = br.Close()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				i = -1 // not this statement's fault: the connection, the deadline, the batch
			}
			return i, err
		}
	}
	if err := br.Close(); err != nil { // the commit
		return -1, err
	}
	return -1, nil
}

// deliver hands each request of group its outcome and releases the holds of the requests whose
// callers gave up meanwhile. When the whole group failed because Postgres is unreachable
// (down), the requests still waiting for a group get the same error at once rather than each
// waiting out another deadline: a partitioned database still yields a prompt 503.
func (a *Admitter) deliver(group []*waiter, down error) {
	var abandoned []*admission
	a.mu.Lock()
	a.inflight--
	for _, w := range group {
		w.finished = true
		if w.abandoned && w.err == nil && w.adm.admitted() {
			abandoned = append(abandoned, w.adm)
		}
		close(w.done)
	}
	if down != nil && database.Unreachable(down) {
		for _, w := range a.pending {
			w.sent, w.finished, w.err = true, true, down
			close(w.done)
		}
		a.pending = nil
	}
	a.flush()
	a.mu.Unlock()

	for _, adm := range abandoned {
		a.release(adm.r.AccountID, adm.r.Hold)
	}
}
