package usage_test

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
