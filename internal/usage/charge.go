package usage

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Ledger admits requests and settles what they owe. It is the one place where a failed or
// partly delivered request is given its money back: handlers take a Charge from Admit and
// `defer charge.Close()`, like a deferred transaction, and mark what they delivered; Close
// refunds the rest. No handler calls a refund itself. See docs/api.md ("Metering").
type Ledger struct {
	db  DB
	log *slog.Logger
	// group, when set, admits requests in groups (Admitter) instead of one statement each.
	group *Admitter
	// background counts refunds still being retried behind their responses; Close waits.
	background sync.WaitGroup
	// holds, when set, keeps the rows this ledger writes held by this replica until delivered,
	// so that a replica killed mid-request leaves nothing undelivered billed (Holds).
	holds *Holds
	// abandoned: the ledger writes nothing more (Abandon).
	abandoned atomic.Bool
	// closing is closed by Close: background removals stop waiting.
	closing   chan struct{}
	closeOnce sync.Once
}

// HoldRows makes l write its rows held by h's replica and confirm them once delivered; the API
// server's ledger does. l.Close closes h. It returns l.
func (l *Ledger) HoldRows(h *Holds) *Ledger {
	l.holds = h
	return l
}

// errAbandoned is what a charge of an abandoned ledger gets for a write.
var errAbandoned = errors.New("usage ledger abandoned")

// Abandon makes the ledger behave as if its process had been killed: it writes nothing more (no
// refund, no row, no confirmation) and its holds stop heartbeating (Holds.Abandon). The fault
// tests use it to leave a request's rows as a SIGKILL would while its handler runs on.
func (l *Ledger) Abandon() {
	l.abandoned.Store(true)
	if l.holds != nil {
		l.holds.Abandon()
	}
}

// NewLedger returns a ledger on db that admits each request alone (Admit).
func NewLedger(db DB, log *slog.Logger) *Ledger {
	return &Ledger{db: db, log: log, closing: make(chan struct{})}
}

// NewGroupedLedger returns a ledger on db that admits requests in groups collected for up to
// window (Admitter); a window of zero admits each alone, as NewLedger's does.
func NewGroupedLedger(db BatchDB, log *slog.Logger, window time.Duration) *Ledger {
	return &Ledger{db: db, log: log, group: NewAdmitter(db, log, window), closing: make(chan struct{})}
}

// Close waits for the groups in flight and the refunds still being retried.
func (l *Ledger) Close() {
	if l.group != nil {
		l.group.Close()
	}
	l.closeOnce.Do(func() { close(l.closing) })
	l.background.Wait()
	if l.holds != nil {
		l.holds.Close() // after the refunds: what they could not withdraw is then swept
	}
}

// Admit runs admission (Admit, or the ledger's Admitter) and returns the request's charge. On
// refusal the charge is nil and nothing is owed (rate-limit units are spent, as Admit explains).
func (l *Ledger) Admit(ctx context.Context, r Request) (*Charge, Decision, error) {
	var (
		d   Decision
		err error
	)
	l.hold(r.Rows)
	if !r.Free && len(r.Rows) == 0 && r.Reservation == uuid.Nil {
		// Results recorded after admission: the emails are reserved under the spend cap
		// until they are (Request.Reservation), held by this replica like its rows.
		r.Reservation = uuid.New()
		if l.holds != nil {
			// Not waited for, unlike a held row's: a reservation is new (created_at is now),
			// so the sweep leaves it to a replica without a heartbeat row for the grace, and
			// this request's 503 during an outage must not wait for a heartbeat first.
			go l.holds.start()
			r.ReservedBy = l.holds.id
		}
	}
	if l.group != nil {
		d, err = l.group.Admit(ctx, r)
	} else {
		d, err = Admit(ctx, l.db, r)
	}
	if err != nil {
		if len(r.Rows) > 0 && !refused(err) && !errors.As(err, new(notSent)) {
			// A statement whose deadline expired may still have committed (the cancel came
			// after the commit), or may commit later still: take back the rows it may have
			// written, with the quota units it took, now and again as late as a doubtful
			// Record's rows (withdrawLate). withdraw removes only rows that exist, so each goes
			// once. All of it behind the 503: Postgres most likely did not answer the admission
			// either.
			keys := make([]string, len(r.Rows))
			for i, row := range r.Rows {
				keys[i] = row.ItemKey
			}
			account := r.AccountID
			l.late(false, append([]time.Duration{0}, lateWithdrawals...), func(ctx context.Context) error {
				return withdraw(ctx, l.db, account, keys, returnUnits)
			}, func(err error) {
				l.log.Warn("usage: removing the rows of an admission whose outcome is unknown", "account", account, "rows", len(keys), "err", err)
			})
		}
		if !refused(err) && !errors.As(err, new(notSent)) {
			l.releaseLate(r.Reservation) // the same for a reservation the statement may have made
		}
		return nil, d, err
	}
	return &Charge{ledger: l, d: d, units: r.Units}, d, nil
}

// hold marks rows as held by this replica (in place), when the ledger holds rows.
func (l *Ledger) hold(rows []Row) {
	if l.holds == nil || len(rows) == 0 {
		return
	}
	l.holds.start()
	for i := range rows {
		rows[i].heldBy = l.holds.id
	}
}

// confirm queues the confirmation of delivered rows, when the ledger holds rows.
func (l *Ledger) confirm(keys []string) {
	if l.holds != nil {
		l.holds.confirm(keys)
	}
}

// Charge is what one admitted request owes: its free-tier quota units, the usage rows admission
// wrote, and the rows the handler recorded for results. Each result is owed only once it has
// reached the client (Deliver, Settle); Close gives back everything else.
type Charge struct {
	ledger *Ledger
	d      Decision
	units  int

	mu        sync.Mutex
	settled   bool
	delivered int
	pending   map[string]bool // rows recorded (Record) whose results have not reached the client
	// doubtful are the rows of a Record whose outcome is unknown (its deadline passed, the
	// connection broke): Postgres may still commit them later. Close refunds their quota units
	// at once, like those of emails that never got a row, and removes the rows, now and again
	// for a while after (Ledger.withdrawLate), without touching the units a second time.
	doubtful []string
	closed   bool
	release  sync.Once // of the reservation (Decision.Reservation), by Close
}

// Record writes result rows of this request (Record) and keeps them owed only until Close,
// unless Deliver or Settle says the client got them.
//
// The write does not end when the request's context is cancelled (a client that hangs up is the
// commonest reason): cut off mid-statement, it could still commit after Close had looked for its
// rows, and leave them billed. It keeps the context's deadline, or gets database.QueryTimeout.
// A failed write is one of two kinds. Postgres answered an error: the statement rolled back and
// its rows do not exist, so Close refunds their emails' quota units like those of emails that
// never had a row. Its outcome is unknown (the deadline passed, the connection broke): the rows
// may still commit, so they are doubtful (see Charge.doubtful).
func (c *Charge) Record(ctx context.Context, rows []Row) error {
	if c.ledger.holds != nil {
		rows = slices.Clone(rows) // held by this replica; the caller's rows stay as they were
		c.ledger.hold(rows)
	}
	err := errAbandoned
	if !c.ledger.abandoned.Load() {
		rctx, cancel := detached(ctx)
		err = recordReserved(rctx, c.ledger.db, rows, c.d.Reservation)
		cancel()
	}
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.ItemKey
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && c.settled: // recorded after Settle: owed at once
		c.ledger.confirm(keys)
	case err == nil || errors.Is(err, errAbandoned):
		if c.pending == nil {
			c.pending = make(map[string]bool, len(rows))
		}
		for _, k := range keys {
			c.pending[k] = true
		}
	case !rolledBack(err) && c.settled: // no Close to come: remove them from here
		c.ledger.withdrawLate(c.d.AccountID, keys)
	case !rolledBack(err):
		c.doubtful = append(c.doubtful, keys...)
	}
	return err
}

// detached is ctx without its cancellation, keeping its deadline if it has one.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), d)
}

// rolledBack reports whether a failed write certainly wrote nothing: Postgres answered an error
// (the statement's implicit transaction rolled back), or the statement was never sent.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// refused reports whether err is admission refusing the request (nothing written), as opposed
// to the datastore failing (something may have been written).
func refused(err error) bool {
	var (
		rl *RateLimited
		qe *QuotaExceeded
		sc *SpendCapExceeded
	)
	return errors.As(err, &rl) || errors.As(err, &qe) || errors.As(err, &sc)
}

// Deliver says the results of these recorded rows reached the client: they are owed.
func (c *Charge) Deliver(itemKeys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	confirmed := make([]string, 0, len(itemKeys))
	for _, k := range itemKeys {
		if c.pending[k] {
			delete(c.pending, k)
			c.delivered++
			confirmed = append(confirmed, k)
		}
	}
	c.ledger.confirm(confirmed)
}

// Settle says the request was served in full: everything admitted is owed.
func (c *Charge) Settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled || c.closed {
		return
	}
	c.settled = true
	owed := append(make([]string, 0, len(c.d.Logged)+len(c.pending)), c.d.Logged...)
	for k := range c.pending {
		owed = append(owed, k)
	}
	c.ledger.confirm(owed)
}

// Close settles the charge: unless Settle was called, it takes back the rows of results that did
// not reach the client, the quota units of the emails not delivered, and the rows admission wrote
// that still have no verdict. It does not run on the request's context (a client that hung up is
// the commonest reason to get here, and its cancelled context must not leave the charge standing)
// and tries once, briefly, on the response's path; when Postgres does not answer, it goes on
// behind the response with backoff, so a partitioned database does not also hold the error
// response. Close may be called more than once; only the first counts.
func (c *Charge) Close() {
	// Whatever was not recorded is not coming: its emails leave the spend cap's count.
	c.release.Do(func() { c.ledger.release(c.d.Reservation) })
	c.mu.Lock()
	if c.closed || c.settled {
		c.closed = true
		c.mu.Unlock()
		return
	}
	c.closed = true
	withdraw := make([]string, 0, len(c.pending))
	for k := range c.pending {
		withdraw = append(withdraw, k)
	}
	doubtful := c.doubtful
	// The quota units of recorded rows go back with the rows, one per row actually removed
	// (settle): if another replica's sweep removed them first (this one was cut off from
	// Postgres past its grace), their units are not given back twice. The emails that have no
	// row — never written, rolled back, or doubtful — have theirs given back as a number
	// (Refund), except the doubtful ones: their rows may still commit and be swept, so their
	// units go back once per key (returnDoubtfulUnits).
	refund := c.d
	rowless := min(c.d.QuotaCharged, max(0, c.units-c.delivered-len(withdraw)))
	unitsOf := doubtful[:min(len(doubtful), rowless)]
	refund.QuotaCharged = rowless - len(unitsOf)
	refund.RefundID = uuid.New() // the same for every retry of this refund (settle)
	c.mu.Unlock()
	if len(doubtful) > 0 {
		c.ledger.withdrawLate(c.d.AccountID, doubtful)
	}
	if len(withdraw) == 0 && len(unitsOf) == 0 && refund.QuotaCharged == 0 && len(refund.Logged) == 0 {
		return
	}
	c.ledger.settle(refund, withdraw, unitsOf)
	// Admission's rows that Refund keeps (they already had a verdict) stay owed, as they would
	// without holds; the ones it removed are not there to confirm.
	c.ledger.confirm(refund.Logged)
}

const (
	refundWait     = 500 * time.Millisecond // on the response's path
	refundPatience = 2 * time.Minute        // behind it
)

// lateWithdrawals are the waits, one after the other, between the removals of doubtful rows: a
// write cut off by its deadline can still commit once what held it up (a lock, a stalled disk)
// lets go, so the rows are looked for again over ten minutes.
var lateWithdrawals = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 8 * time.Minute}

// withdrawLate removes doubtful rows (Charge.doubtful) of account now, on the response's path,
// and again after each of lateWithdrawals behind it, with their billable counts but not their
// quota units, which Close refunded. Ledger.Close cuts the waits short and makes one last removal.
func (l *Ledger) withdrawLate(account string, keys []string) {
	l.late(true, lateWithdrawals, func(ctx context.Context) error { return withdraw(ctx, l.db, account, keys, keepUnits) }, func(err error) {
		l.log.Warn("usage: removing rows whose write timed out", "account", account, "rows", len(keys), "err", err)
	})
}

// lateReleases are the waits before the releases of a reservation whose admission had an
// unknown outcome: fewer and shorter than lateWithdrawals, as every request admitted during a
// Postgres stall gets them; a reservation whose admission commits later still is released by the
// sweep after ReservationMaxAge, and until then only makes the cap stricter. All of them run
// behind the response: the request has already failed (a 503 during a Postgres outage must not
// wait for them), and an open reservation only makes the cap stricter for a moment.
var lateReleases = []time.Duration{0, time.Second, 10 * time.Second}

// releaseLate closes reservation id after each of lateReleases: the admission that made it failed
// with an unknown outcome (its deadline passed, its connection broke), and may still commit after
// a first release found nothing to close.
func (l *Ledger) releaseLate(id uuid.UUID) {
	if id == uuid.Nil {
		return
	}
	l.late(false, lateReleases, func(ctx context.Context) error { return Release(ctx, l.db, id) }, func(err error) {
		l.log.Warn("usage: releasing the reservation of an admission whose outcome is unknown", "reservation", id, "err", err)
	})
}

// late runs op (on the response's path first when onPath) and again after each of waits behind
// it, for a write whose outcome is unknown and that may commit late; Ledger.Close cuts the waits
// short and runs op one last time. failed hears of each failed run.
func (l *Ledger) late(onPath bool, waits []time.Duration, op func(context.Context) error, failed func(error)) {
	if l.abandoned.Load() {
		return
	}
	run := func(wait time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := op(ctx); err != nil && l.log != nil {
			failed(err)
		}
	}
	if onPath {
		run(refundWait)
	}
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		for _, wait := range waits {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.closing:
				t.Stop()
				run(2 * refundWait)
				return
			}
			run(2 * refundWait)
		}
	}()
}

// release closes reservation id (Release), as settle writes a refund. One it cannot close is
// released by the sweep (ReleaseStale): at once when this replica is retired or dies, after
// ReservationMaxAge otherwise. Until then it only makes the cap stricter.
func (l *Ledger) release(id uuid.UUID) {
	if id == uuid.Nil || l.abandoned.Load() {
		return
	}
	l.persist(func(ctx context.Context) error { return Release(ctx, l.db, id) }, func(err error) {
		l.log.Warn("usage: a spend-cap reservation could not be released; the sweep will release it", "reservation", id, "err", err)
	})
}

// persist runs write once on the response's path, briefly (refundWait), and when that fails goes
// on behind the response with backoff for up to refundPatience (Ledger.Close waits), then reports
// the last error to failed.
func (l *Ledger) persist(write func(context.Context) error, failed func(error)) {
	try := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), refundWait)
		defer cancel()
		return write(ctx)
	}
	if try() == nil {
		return
	}
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		policy := backoff.NewExponentialBackOff()
		policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, refundPatience
		if err := backoff.Retry(try, policy); err != nil {
			failed(err)
		}
	}()
}

func (l *Ledger) settle(d Decision, withdrawKeys, doubtfulKeys []string) {
	if l.abandoned.Load() {
		return
	}
	var withdrawn, returned bool
	l.persist(func(ctx context.Context) error {
		if !withdrawn {
			if err := withdraw(ctx, l.db, d.AccountID, withdrawKeys, returnUnits); err != nil {
				return err
			}
			withdrawn = true
		}
		if !returned {
			if err := returnDoubtfulUnits(ctx, l.db, d.AccountID, d.Month, doubtfulKeys); err != nil {
				return err
			}
			returned = true
		}
		return Refund(ctx, l.db, d)
	}, func(err error) {
		l.log.Error("usage refund", "account", d.AccountID, "quota_units", d.QuotaCharged,
			"rows", len(d.Logged), "withdrawn", len(withdrawKeys), "err", err)
	})
}
