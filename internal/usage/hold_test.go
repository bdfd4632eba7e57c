package usage_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

func newLedger(t *testing.T, pool *pgxpool.Pool, window time.Duration) *usage.Ledger {
	t.Helper()
	l := usage.NewGroupedLedger(pool, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)), window)
	t.Cleanup(l.Close)
	return l
}

// A request that delivers part of what it was admitted for is billed for what it delivered, and
// the rest of its hold goes back when it ends (docs/reliability.md, "Metering guarantees").
func TestNothingUndeliveredIsBilled(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	l := newLedger(t, pool, time.Millisecond)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 5)
	r.Lifetime = time.Minute
	h, _, err := l.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if c := usagetest.Of(t, pool, acct); c.Held != 5 || c.Holds != 1 || c.Quota != 0 {
		t.Fatalf("after admission: %+v, want 5 held and nothing billed", c)
	}
	h.Deliver(resultRow(acct, "d:0", true), resultRow(acct, "d:1", false))
	h.Deliver(resultRow(acct, "d:2", true))
	h.Close()
	h.Close() // only the first counts
	l.Flush()
	if c := usagetest.Of(t, pool, acct); c != (usagetest.Counts{Quota: 3, Billable: 2, Daily: 2}) {
		t.Fatalf("after the request: %+v, want 3 units and 2 billable, nothing held", c)
	}
	if rows := usagetest.Rows(t, pool, acct); len(rows) != 3 {
		t.Fatalf("%d rows, want one per delivered result", len(rows))
	}
}

// Two pools stand for two API replicas; concurrent batches of one capped account, each delivered
// in full, never take the account past its cap, and every admitted batch is billed.
func TestHoldsKeepConcurrentRequestsUnderTheCap(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	pools := []*pgxpool.Pool{pgtest.Pool(t, dbURL), pgtest.Pool(t, dbURL)}
	ledgers := []*usage.Ledger{newLedger(t, pools[0], time.Millisecond), newLedger(t, pools[1], 0)}
	acct := newAccount(t, pools[0], "builder")
	pgtest.Exec(t, pools[0], `UPDATE accounts SET hard_cap_eur = 0.20 WHERE id = $1`, acct) // 50 over 10 included
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ledgers[i%2]
			h, _, err := l.Admit(ctx, usage.Request{AccountID: acct, Units: 5, RatePerMin: 1000, MonthlyCalls: 10,
				OverageEUR: 0.004, Now: now, Lifetime: time.Minute})
			if err != nil {
				return
			}
			mu.Lock()
			admitted++
			mu.Unlock()
			for k := range 5 {
				h.Deliver(resultRow(acct, fmt.Sprintf("b%d:%d", i, k), true))
			}
			h.Close()
		}()
	}
	wg.Wait()
	for _, l := range ledgers {
		l.Flush()
	}
	if admitted != 12 {
		t.Fatalf("admitted %d batches of 5 with room for 60 emails, want 12", admitted)
	}
	if c := usagetest.Of(t, pools[1], acct); c.Billable != 60 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want 60 billed (the cap) and nothing held", c)
	}
}

// A request's hold outlives its replica only until its lifetime: the sweep gives its room back,
// and rows that arrive for it afterwards are not billed.
func TestExpiredHoldGivesItsRoomBack(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 10)
	r.MonthlyCalls, r.RatePerMin, r.Lifetime = 10, 100, time.Hour
	d, err := usage.Admit(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	// A list's hold, without a lifetime, is never swept.
	list := freeReq(acct, 0)
	list.NoRate, list.Hold = true, uuid.New()
	if _, err := usage.Admit(ctx, pool, list); err != nil {
		t.Fatal(err)
	}
	if n, err := usage.Expire(ctx, pool); err != nil || n != 0 {
		t.Fatalf("swept %d live holds, %v", n, err)
	}
	r.Units = 1
	if _, err := usage.Admit(ctx, pool, r); err == nil {
		t.Fatal("admitted past a quota held in full")
	}
	if n := usagetest.Expire(t, pool, acct); n != 1 {
		t.Fatalf("swept %d holds, want the request's", n)
	}
	if err := usage.Bill(ctx, pool, d.Hold, []usage.Row{resultRow(acct, "late:0", true)}, false); err != nil {
		t.Fatal(err)
	}
	if c := usagetest.Of(t, pool, acct); c != (usagetest.Counts{Holds: 1}) {
		t.Fatalf("after the sweep and a late row: %+v, want the list's empty hold only", c)
	}
	if _, err := usage.Admit(ctx, pool, r); err != nil {
		t.Fatalf("the expired hold's room is not back: %v", err)
	}
}

// A ledger that dies (Abandon, as SIGKILL leaves it) writes nothing more: the results it had
// delivered but not billed go unbilled, and its holds expire.
func TestAbandonedLedgerBillsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	l := newLedger(t, pool, 0)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 2)
	r.Lifetime = time.Minute
	h, _, err := l.Admit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	l.Abandon()
	h.Deliver(resultRow(acct, "gone:0", true))
	h.Close()
	l.Flush()
	if c := usagetest.Of(t, pool, acct); c.Quota != 0 || c.Billable != 0 || c.Held != 2 {
		t.Fatalf("after the death: %+v, want nothing billed and the hold still there", c)
	}
	usagetest.Expire(t, pool, acct)
	if c := usagetest.Of(t, pool, acct); c != (usagetest.Counts{}) {
		t.Fatalf("after the sweep: %+v, want nothing", c)
	}
}

// A hold admitted at the end of a month bills its results in that month, where its units were
// held, also when they are delivered in the next one.
func TestResultsAreBilledInTheMonthOfTheirHold(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 2)
	r.Now = time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	d, err := usage.Admit(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	row := resultRow(acct, "turn:0", true)
	row.OccurredAt = time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC)
	if err := usage.Bill(ctx, pool, d.Hold, []usage.Row{row}, true); err != nil {
		t.Fatal(err)
	}
	if used, _ := usage.MonthUsed(ctx, pool, acct, true, r.Now); used != 1 {
		t.Fatalf("November used %d, want 1", used)
	}
	if used, _ := usage.MonthUsed(ctx, pool, acct, true, row.OccurredAt); used != 0 {
		t.Fatalf("December used %d, want 0", used)
	}
}

// Adopt hands a request's hold to a job: the sweep no longer ends it.
func TestAdoptedHoldDoesNotExpire(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "scale")
	r := usage.Request{AccountID: acct, Units: 1, RatePerMin: 10, MonthlyCalls: 100, Now: now, Lifetime: time.Millisecond}
	d, err := usage.Admit(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := usage.Adopt(ctx, pool, d.Hold); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, err := usage.Expire(ctx, pool); err != nil || n != 0 {
		t.Fatalf("swept %d adopted holds, %v", n, err)
	}
}
