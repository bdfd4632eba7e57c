package usage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
)

// cappedAt100 is a builder account that has used its included 5,000 verifications this month and
// whose EUR 0.40 cap leaves room for 100 more at EUR 0.004.
func cappedAt100(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, billable) VALUES ($1, $2, 5000)`, acct, usage.MonthStart(now))
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 0.40 WHERE id = $1`, acct)
	return acct
}

func paidReq(acct string, emails int) usage.Request {
	return usage.Request{AccountID: acct, Units: emails, RatePerMin: 100000, MonthlyCalls: 5000, OverageEUR: 0.004, Now: now}
}

// reservedNow is the month's reserved count and the emails of the account's open reservations;
// the two must agree.
func reservedNow(t *testing.T, pool *pgxpool.Pool, acct string) int {
	t.Helper()
	month := count(t, pool, `SELECT coalesce(sum(reserved), 0) FROM usage_monthly WHERE account_id = $1`, acct)
	open := count(t, pool, `SELECT coalesce(sum(emails), 0) FROM usage_reservations WHERE account_id = $1`, acct)
	if month != open {
		t.Fatalf("usage_monthly.reserved %d, open reservations %d", month, open)
	}
	return month
}

func rowsOf(acct, prefix string, n int) []usage.Row {
	rows := make([]usage.Row, n)
	for i := range rows {
		rows[i] = streamRow(acct, fmt.Sprintf("%s:%d", prefix, i))
	}
	return rows
}

// Batches and streams record their results after admission. Their emails are reserved under the
// cap from admission on, so one admitted while another runs sees it: two 60-email batches no longer
// both pass a cap with room for 100 (before, the second saw only what the first had recorded).
// Recorded results move from reserved to billed; what the request did not deliver leaves both at
// its end.
func TestReservationsKeepRunningRequestsUnderTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := cappedAt100(t, pool)
	ledger := usage.NewLedger(pool, slog.New(slog.DiscardHandler))
	defer ledger.Close()
	var sc *usage.SpendCapExceeded

	a, d, err := ledger.Admit(ctx, paidReq(acct, 60))
	if err != nil || d.Reservation == uuid.Nil {
		t.Fatalf("first batch: %+v %v", d, err)
	}
	if _, _, err := ledger.Admit(ctx, paidReq(acct, 60)); !errors.As(err, &sc) {
		t.Fatalf("a second 60 while the first runs: %v, want the cap", err)
	}
	b, _, err := ledger.Admit(ctx, paidReq(acct, 40)) // 60 + 40: exactly the cap
	if err != nil {
		t.Fatalf("40 more: %v", err)
	}
	if r := reservedNow(t, pool, acct); r != 100 {
		t.Fatalf("reserved %d, want 100", r)
	}

	// The first batch records 30 results: billed now, no longer reserved.
	rows := rowsOf(acct, "a", 30)
	if err := a.Record(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if _, billable, _ := monthly(t, pool, acct); billable != 5030 {
		t.Fatalf("billable %d, want 5030", billable)
	}
	if r := reservedNow(t, pool, acct); r != 70 {
		t.Fatalf("reserved %d after 30 recorded, want 70", r)
	}
	if _, _, err := ledger.Admit(ctx, paidReq(acct, 1)); !errors.As(err, &sc) {
		t.Fatalf("one more with the cap taken: %v", err)
	}
	// It delivers 20 of them and ends: its 30 never-recorded emails and its 10 undelivered
	// results leave the counts.
	for _, r := range rows[:20] {
		a.Deliver(r.ItemKey)
	}
	a.Close()
	if _, billable, _ := monthly(t, pool, acct); billable != 5020 {
		t.Fatalf("billable %d after the first batch ended, want 5020", billable)
	}
	if r := reservedNow(t, pool, acct); r != 40 {
		t.Fatalf("reserved %d after the first batch ended, want 40 (the second's)", r)
	}
	c, _, err := ledger.Admit(ctx, paidReq(acct, 40)) // 5020 + 40 reserved + 40 = 100 over
	if err != nil {
		t.Fatalf("40 into the room the first batch left: %v", err)
	}
	if _, _, err := ledger.Admit(ctx, paidReq(acct, 1)); !errors.As(err, &sc) {
		t.Fatalf("one more: %v", err)
	}
	for _, ch := range []*usage.Charge{b, c} {
		ch.Settle()
		ch.Close()
	}
	if r := reservedNow(t, pool, acct); r != 0 {
		t.Fatalf("reserved %d with nothing running", r)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_reservations WHERE account_id = $1`, acct); n != 0 {
		t.Fatalf("%d reservations left open", n)
	}
}

// Requests admitted at the same moment pass the cap no more than one after the other: of twelve
// 30-email batches against room for 100, three get in (before, all twelve did), whether each is
// admitted alone or in groups (the API's Admitter).
func TestConcurrentBatchesStopAtTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	log := slog.New(slog.DiscardHandler)
	t.Run("alone", func(t *testing.T) { concurrentBatchesAtTheCap(t, pool, usage.NewLedger(pool, log)) })
	t.Run("grouped", func(t *testing.T) {
		concurrentBatchesAtTheCap(t, pool, usage.NewGroupedLedger(pool, log, 5*time.Millisecond))
	})
}

func concurrentBatchesAtTheCap(t *testing.T, pool *pgxpool.Pool, ledger *usage.Ledger) {
	acct := cappedAt100(t, pool)
	defer ledger.Close()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		charges []*usage.Charge
		other   []error
	)
	start := make(chan struct{})
	for range 12 {
		wg.Go(func() {
			<-start
			ch, _, err := ledger.Admit(ctx, paidReq(acct, 30))
			var sc *usage.SpendCapExceeded
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				charges = append(charges, ch)
			case !errors.As(err, &sc):
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(other) > 0 || len(charges) != 3 {
		t.Fatalf("%d admitted, want 3; errors other than the cap: %v", len(charges), other)
	}
	if r := reservedNow(t, pool, acct); r != 90 {
		t.Fatalf("reserved %d, want 90", r)
	}
	for _, ch := range charges {
		ch.Close()
	}
	if r := reservedNow(t, pool, acct); r != 0 {
		t.Fatalf("reserved %d after every request ended", r)
	}
}

// A replica that dies mid-request cannot release its reservation; another replica's sweep does
// once the dead one's heartbeat has lapsed, and a reservation nobody holds is released after
// ReservationMaxAge. A live replica's reservation is left alone.
func TestSweepReleasesTheReservationsOfADeadReplica(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := cappedAt100(t, pool)
	dead, _ := heldLedger(pool, pool)
	live, _ := heldLedger(pool, pool)
	defer live.Close()

	if _, _, err := dead.Admit(ctx, paidReq(acct, 50)); err != nil {
		t.Fatal(err)
	}
	running, _, err := live.Admit(ctx, paidReq(acct, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	dead.Abandon() // SIGKILL: no Close, no more heartbeats
	if r := reservedNow(t, pool, acct); r != 70 {
		t.Fatalf("reserved %d, want 70", r)
	}
	waitFor(t, "the dead replica's reservation released", func() bool {
		n, err := usage.ReleaseStale(ctx, pool, testGrace)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if r := reservedNow(t, pool, acct); r != 20 {
		t.Fatalf("reserved %d after the sweep, want the live replica's 20", r)
	}

	// A reservation with no holder (a ledger without holds) goes only with age.
	pgtest.Exec(t, pool, `INSERT INTO usage_reservations (id, account_id, month, emails, created_at)
		VALUES ($1, $2, $3, 5, now() - $4::interval)`, uuid.New(), acct, usage.MonthStart(now), usage.ReservationMaxAge+time.Minute)
	pgtest.Exec(t, pool, `UPDATE usage_monthly SET reserved = reserved + 5 WHERE account_id = $1`, acct)
	if n, err := usage.ReleaseStale(ctx, pool, testGrace); err != nil || n != 1 {
		t.Fatalf("released %d (%v), want the old one", n, err)
	}
	if r := reservedNow(t, pool, acct); r != 20 {
		t.Fatalf("reserved %d, want 20", r)
	}
}

// Accounts without a cap, free accounts and requests whose rows admission writes reserve nothing:
// there is nothing to protect, and no statement is added to their path.
func TestNoReservationWithoutACap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ledger := usage.NewLedger(pool, slog.New(slog.DiscardHandler))
	defer ledger.Close()
	uncapped := newAccount(t, pool, "builder")
	free := newAccount(t, pool, "free")
	capped := cappedAt100(t, pool)
	single := paidReq(capped, 1)
	single.Rows = []usage.Row{pendingRow(capped, "single:0")}
	for name, r := range map[string]usage.Request{"uncapped": paidReq(uncapped, 10), "free": freeReq(free, 5), "single": single} {
		ch, d, err := ledger.Admit(ctx, r)
		if err != nil || d.Reservation != uuid.Nil {
			t.Fatalf("%s: %+v %v", name, d, err)
		}
		ch.Settle()
		ch.Close()
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_reservations`); n != 0 {
		t.Fatalf("%d reservations", n)
	}
}

// A grouped ledger (the API's): a caller that gives up while its group runs gets an error at
// once, before the group has committed its reservation, so the release its ledger makes then
// finds nothing. The group then admits the request and takes the admission back (Admitter), its
// reservation with it: nothing stays reserved for 10 minutes (before, it did).
func TestAbandonedGroupedAdmissionReleasesItsReservation(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := cappedAt100(t, pool)
	ledger := usage.NewGroupedLedger(pool, slog.New(slog.DiscardHandler), 5*time.Millisecond)

	// Another transaction holds the month row: the admission's group blocks on it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM usage_monthly WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
		t.Fatal(err)
	}
	cctx, giveUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := ledger.Admit(cctx, paidReq(acct, 60))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the group is sent and waits for the lock
	giveUp()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, usage.ErrUnavailable) {
			t.Fatalf("abandoned admission: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the caller that gave up still waits")
	}
	if err := tx.Rollback(ctx); err != nil { // the group now admits the request
		t.Fatal(err)
	}
	ledger.Close() // groups in flight and the take-back of the abandoned admission have run

	open := count(t, pool, `SELECT count(*) FROM usage_reservations WHERE account_id = $1`, acct)
	r := reservedNow(t, pool, acct)
	if open != 0 || r != 0 {
		t.Fatalf("nothing runs, yet %d reservation(s) stay open with %d emails reserved", open, r)
	}
}

// A request admitted in the last second of a month reserves its emails on that month's row, and
// its results are billed in the next month, when they are recorded. An admission in the new month
// counts that reservation too, so the two cannot pass the new month's cap together (before, both
// were admitted and December billed twice the cap).
func TestReservationsOfLastMonthCountAtTheTurnOfTheMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 0.40 WHERE id = $1`, acct) // 100 emails at EUR 0.004
	ledger := usage.NewLedger(pool, slog.New(slog.DiscardHandler))
	defer ledger.Close()
	req := func(at time.Time) usage.Request {
		return usage.Request{AccountID: acct, Units: 100, RatePerMin: 100000, OverageEUR: 0.004, Now: at}
	}
	nov := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	dec := time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC)
	a, _, err := ledger.Admit(ctx, req(nov))
	if err != nil {
		t.Fatalf("November batch: %v", err)
	}
	var sc *usage.SpendCapExceeded
	if _, _, err := ledger.Admit(ctx, req(dec)); !errors.As(err, &sc) {
		t.Fatalf("December batch while November's runs: %v, want the cap", err)
	}
	rows := rowsOf(acct, "nov", 100)
	for i := range rows {
		rows[i].OccurredAt = dec.Add(time.Second)
	}
	if err := a.Record(ctx, rows); err != nil {
		t.Fatal(err)
	}
	a.Settle()
	a.Close()
	if r := reservedNow(t, pool, acct); r != 0 {
		t.Fatalf("reserved %d after the November batch ended", r)
	}
	if billed := count(t, pool, `SELECT billable FROM usage_monthly WHERE account_id = $1 AND month = $2`, acct, usage.MonthStart(dec)); billed != 100 {
		t.Fatalf("December billed %d, want 100", billed)
	}
	if _, _, err := ledger.Admit(ctx, req(dec)); !errors.As(err, &sc) {
		t.Fatalf("December batch with December's cap used: %v, want the cap", err)
	}
}

// A stream's Record and a single verification's admission of the same account lock the counters
// in the same order (usage_monthly, then usage_daily), so they do not deadlock; before, Record
// took usage_daily first and both waited past their deadline. A third transaction holding the
// reservation row only makes the interleaving deterministic.
func TestRecordAndSingleAdmissionDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := cappedAt100(t, pool)
	ledger := usage.NewLedger(pool, slog.New(slog.DiscardHandler))
	defer ledger.Close()
	stream, d, err := ledger.Admit(ctx, paidReq(acct, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// The day's row exists, as it does once anything was recorded that day.
	if err := stream.Record(ctx, rowsOf(acct, "s0", 1)); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM usage_reservations WHERE id = $1 FOR UPDATE`, d.Reservation); err != nil {
		t.Fatal(err)
	}
	recorded := make(chan error, 1)
	go func() { recorded <- stream.Record(ctx, rowsOf(acct, "s1", 2)) }() // takes usage_daily, waits
	time.Sleep(100 * time.Millisecond)
	single := paidReq(acct, 1)
	single.Rows = []usage.Row{pendingRow(acct, "single")}
	admitted := make(chan error, 1)
	go func() { _, err := usage.Admit(ctx, pool, single); admitted <- err }() // takes usage_monthly, waits
	time.Sleep(100 * time.Millisecond)
	_ = tx.Rollback(ctx)
	time.Sleep(200 * time.Millisecond) // with no cycle both would be done by now
	var cycle int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a, pg_stat_activity b
		WHERE a.pid < b.pid AND a.pid = ANY(pg_blocking_pids(b.pid)) AND b.pid = ANY(pg_blocking_pids(a.pid))`).Scan(&cycle); err != nil {
		t.Fatal(err)
	}
	errR, errA := <-recorded, <-admitted
	if cycle > 0 || errR != nil || errA != nil {
		t.Fatalf("%d pairs of backends blocking each other; record: %v; admission: %v", cycle, errR, errA)
	}
}

// The same for an account without a cap, whose admission needs no answer from its month step:
// the statement still locks usage_monthly before usage_daily, like Record. A third transaction
// holds the month row so that Record and the admission queue behind it in that order; before,
// the admission took usage_daily while it waited, and once the month row was free the two
// deadlocked (seen in the cluster fault test as 1 s timeouts on both paths).
func TestRecordAndUncappedAdmissionDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	// The month's and the day's rows exist, as they do once anything was billed.
	if err := usage.Record(ctx, pool, rowsOf(acct, "first", 1)); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM usage_monthly WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
		t.Fatal(err)
	}
	deadline := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Second) }
	recorded := make(chan error, 1)
	go func() {
		rctx, cancel := deadline()
		defer cancel()
		recorded <- usage.Record(rctx, pool, rowsOf(acct, "later", 2))
	}()
	time.Sleep(100 * time.Millisecond)
	single := paidReq(acct, 1)
	single.Rows = []usage.Row{pendingRow(acct, "single")}
	admitted := make(chan error, 1)
	go func() {
		actx, cancel := deadline()
		defer cancel()
		_, err := usage.Admit(actx, pool, single)
		admitted <- err
	}()
	time.Sleep(100 * time.Millisecond)
	_ = tx.Rollback(ctx)
	if errR, errA := <-recorded, <-admitted; errR != nil || errA != nil {
		t.Fatalf("record: %v; admission: %v", errR, errA)
	}
}

// releaseCounter counts the reservation releases (DELETE FROM usage_reservations) sent through it.
type releaseCounter struct {
	usage.DB
	releases atomic.Int32
}

func (c *releaseCounter) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "DELETE FROM usage_reservations") {
		c.releases.Add(1)
	}
	return c.DB.Exec(ctx, sql, args...)
}

// An admission whose statement was never sent (its caller had gone) made no reservation, so
// nothing is released for it: a failed request costs Postgres nothing more (found in review: the
// late releases of an unknown outcome ran for every failed paid request, capped or not).
func TestUnsentAdmissionReleasesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	db := &releaseCounter{DB: pool}
	ledger := usage.NewLedger(db, slog.New(slog.DiscardHandler))
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := ledger.Admit(gone, paidReq(cappedAt100(t, pool), 10)); !errors.Is(err, usage.ErrUnavailable) {
		t.Fatalf("admission with its caller gone: %v", err)
	}
	time.Sleep(1200 * time.Millisecond) // past the first late release (1 s)
	ledger.Close()                      // which runs the last one at once
	if n := db.releases.Load(); n != 0 {
		t.Fatalf("%d reservation releases sent for an admission that was never sent, want 0", n)
	}
}
