package usage_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// testGrace is the hold grace of these tests: short, so a replica is dead a second after it
// stopped, and long enough for the live one's heartbeat (every grace/6) on a busy machine.
const testGrace = 1500 * time.Millisecond

func heldLedger(pool *pgxpool.Pool, db usage.DB) (*usage.Ledger, *usage.Holds) {
	log := slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil))
	h := usage.NewHolds(db, log, usage.HoldOptions{Grace: testGrace})
	return usage.NewLedger(pool, log).HoldRows(h), h
}

func streamRow(acct, key string) usage.Row {
	r := usage.ResultRow(usage.Item{Key: key, AccountID: acct, Route: "verify_stream"},
		verdict.Result{Email: key + "@example.com", Status: verdict.StatusDeliverable}, nil)
	r.OccurredAt = now
	return r
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A replica that dies mid-request (no Close, no more heartbeats, its queued confirmations lost)
// leaves its undelivered rows held; another replica's sweep withdraws them once the heartbeat has
// lapsed, and the billable counts and free quota drop with them. Rows it had confirmed stay, and a
// live replica's rows in flight are not touched.
func TestSweepWithdrawsWhatADeadReplicaHeld(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	dead, deadHolds := heldLedger(pool, pool)
	live, _ := heldLedger(pool, pool)
	defer live.Close()

	// The dying replica: a stream of 5 admitted, 3 results recorded, the first delivered and
	// confirmed; then a single verify whose row admission wrote, still waiting for the fleet.
	stream, _, err := dead.Admit(ctx, freeReq(acct, 5))
	pgtest.Must(t, err, "admit stream")
	pgtest.Must(t, stream.Record(ctx, []usage.Row{streamRow(acct, "s:0"), streamRow(acct, "s:1"), streamRow(acct, "s:2")}), "record")
	stream.Deliver("s:0")
	waitFor(t, "the delivered row's confirmation", func() bool {
		return count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key = 's:0' AND held_by IS NULL`) == 1
	})
	single := freeReq(acct, 1)
	single.Rows = []usage.Row{pendingRow(acct, "one:0")}
	_, _, err = dead.Admit(ctx, single)
	pgtest.Must(t, err, "admit single")

	// The live replica: a batch of 2 recorded, its response not yet written.
	batch, _, err := live.Admit(ctx, freeReq(acct, 2))
	pgtest.Must(t, err, "admit batch")
	pgtest.Must(t, batch.Record(ctx, []usage.Row{streamRow(acct, "b:0"), streamRow(acct, "b:1")}), "record batch")

	if q, b, d := monthly(t, pool, acct); q != 8 || b != 6 || d != 6 {
		t.Fatalf("before the crash: quota %d, billable %d, daily %d; want 8, 6, 6", q, b, d)
	}
	deadHolds.Abandon() // kill -9: no Close, no refund, no more heartbeats

	// Within the grace the dead replica is still taken for alive: nothing is swept.
	n, err := usage.SweepHeld(ctx, pool, testGrace)
	pgtest.Must(t, err, "early sweep")
	if n != 0 {
		t.Fatalf("the sweep withdrew %d rows of a replica whose heartbeat is still fresh", n)
	}
	time.Sleep(testGrace + 200*time.Millisecond)
	n, err = usage.SweepHeld(ctx, pool, testGrace)
	pgtest.Must(t, err, "sweep")
	if n != 3 {
		t.Errorf("swept %d rows, want the dead replica's 3 unconfirmed ones", n)
	}
	// Quota: 8 minus the 3 withdrawn rows' units. The stream's 2 emails that never had a row keep
	// their units (SweepHeld explains why).
	if q, b, d := monthly(t, pool, acct); q != 5 || b != 3 || d != 3 {
		t.Errorf("after the sweep: quota %d, billable %d, daily %d; want 5, 3, 3", q, b, d)
	}
	var keys string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT string_agg(item_key, ',' ORDER BY item_key) FROM usage_log WHERE account_id = $1`, acct).Scan(&keys), "keys")
	if keys != "b:0,b:1,s:0" {
		t.Errorf("rows left %q, want the live batch's and the confirmed s:0", keys)
	}
	s, err := usage.Summarize(ctx, pool, acct, "free", true, 500, 0, now)
	pgtest.Must(t, err, "summary")
	if s.CallsUsed != 5 {
		t.Errorf("summary calls_used %d, want 5", s.CallsUsed)
	}

	// The live replica's batch goes on normally: delivered, then confirmed in the background.
	batch.Settle()
	batch.Close()
	waitFor(t, "the batch's confirmation", func() bool {
		return count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key LIKE 'b:%' AND held_by IS NULL`) == 2
	})
	if n, err := usage.SweepHeld(ctx, pool, testGrace); err != nil || n != 0 {
		t.Errorf("a second sweep withdrew %d rows (%v), want none", n, err)
	}
	// The dead replica's heartbeat row goes once it holds nothing and a further grace passed.
	time.Sleep(testGrace)
	_, err = usage.SweepHeld(ctx, pool, testGrace)
	pgtest.Must(t, err, "last sweep")
	if n := count(t, pool, `SELECT count(*) FROM api_replicas WHERE id = $1`, deadHolds.Replica()); n != 0 {
		t.Errorf("the dead replica's heartbeat row is still there")
	}
}

// A live replica whose confirmations cannot be written (its statements fail) keeps its rows held,
// and they are not swept while its heartbeat goes on; once confirmations work again they land.
func TestLiveReplicaWithDelayedConfirmationsIsNotSwept(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	blip := &confirmBlip{DB: pool}
	blip.failing.Store(true)
	ledger, _ := heldLedger(pool, blip)
	defer ledger.Close()

	charge, _, err := ledger.Admit(ctx, freeReq(acct, 2))
	pgtest.Must(t, err, "admit")
	pgtest.Must(t, charge.Record(ctx, []usage.Row{streamRow(acct, "x:0"), streamRow(acct, "x:1")}), "record")
	charge.Settle()
	charge.Close()
	waitFor(t, "a failed confirmation", func() bool { return blip.failed.Load() >= 2 })
	time.Sleep(testGrace + 200*time.Millisecond) // longer than the grace: only the heartbeat keeps it alive
	n, err := usage.SweepHeld(ctx, pool, testGrace)
	pgtest.Must(t, err, "sweep")
	if n != 0 {
		t.Fatalf("swept %d rows of a live replica", n)
	}
	if q, b, _ := monthly(t, pool, acct); q != 2 || b != 2 {
		t.Errorf("quota %d, billable %d; want 2 and 2", q, b)
	}
	blip.failing.Store(false)
	waitFor(t, "the retried confirmation", func() bool {
		return count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND held_by IS NULL`, acct) == 2
	})
}

// Delivered rows are confirmed behind the responses, many per statement: 200 requests settled
// at once cost a handful of confirming statements, not 200.
func TestConfirmationsAreBatched(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "scale")
	counter := &confirmBlip{DB: pool}
	ledger, _ := heldLedger(pool, counter)
	const requests = 200
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			r := usage.Request{AccountID: acct, Units: 1, RatePerMin: 10_000, MonthlyCalls: 1_000_000, Now: now,
				Rows: []usage.Row{pendingRow(acct, fmt.Sprintf("c:%d", i))}}
			charge, _, err := ledger.Admit(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			charge.Settle()
		})
	}
	wg.Wait()
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != requests {
		t.Fatalf("%d rows, want %d", n, requests)
	}
	waitFor(t, "every confirmation", func() bool {
		return count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND held_by IS NULL`, acct) == requests
	})
	ledger.Close()
	if c := counter.confirms.Load(); c > 20 {
		t.Errorf("%d confirming statements for %d requests, want a few batches", c, requests)
	}
	t.Logf("%d requests confirmed in %d statements", requests, counter.confirms.Load())
}

// confirmBlip is the real pool, with the replica's confirming statements counted and, while
// failing is set, refused as a Postgres outage would (the heartbeat still gets through).
type confirmBlip struct {
	usage.DB
	failing          atomic.Bool
	failed, confirms atomic.Int32
}

func (b *confirmBlip) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "SET held_by = NULL") {
		if b.failing.Load() {
			b.failed.Add(1)
			return pgconn.CommandTag{}, fmt.Errorf("confirm: connection refused (simulated)")
		}
		b.confirms.Add(1)
	}
	return b.DB.Exec(ctx, sql, args...)
}

// A replica cut off from Postgres past its grace: the sweep withdraws the rows it held and gives
// back their quota units; when the replica's own refund finally lands, the units of those rows
// are not given back a second time (they go back only with a row actually removed), while those
// of emails that never had a row still are.
func TestLateRefundAfterTheSweepGivesQuotaOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	log := slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil))
	base := usage.NewLedger(pool, log)
	c0, _, err := base.Admit(context.Background(), freeReq(acct, 5)) // earlier usage, settled
	if err != nil {
		t.Fatal(err)
	}
	c0.Settle()
	c0.Close()

	h := usage.NewHolds(pool, log, usage.HoldOptions{Grace: time.Hour})
	l := usage.NewLedger(pool, log).HoldRows(h)
	c, _, err := l.Admit(context.Background(), freeReq(acct, 4)) // a stream of 4: 3 recorded, 1 never
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Record(context.Background(), []usage.Row{streamRow(acct, "late-a"), streamRow(acct, "late-b"), streamRow(acct, "late-c")}); err != nil {
		t.Fatal(err)
	}
	if q, _, _ := monthly(t, pool, acct); q != 9 {
		t.Fatalf("quota units %d after admission, want 9", q)
	}
	pgtest.Exec(t, pool, `UPDATE api_replicas SET alive_until = now() - interval '1 minute' WHERE id = $1`, h.Replica())
	if _, err := usage.SweepHeld(context.Background(), pool, time.Hour); err != nil {
		t.Fatal(err)
	}
	if q, _, _ := monthly(t, pool, acct); q != 6 {
		t.Fatalf("quota units %d after the sweep, want 6 (the 3 rows' units back)", q)
	}
	c.Close() // the replica's refund, late
	l.Close()
	if q, _, _ := monthly(t, pool, acct); q != 5 {
		t.Fatalf("quota units %d after the late refund, want 5: the rowless email's unit back, the rows' not twice", q)
	}
}

// A new replica's first held row is protected from the moment it is written: the replica's
// heartbeat lands before it, so a sweep that runs at once (another replica's) does not take the
// row for one of a replica that died before its first heartbeat, even when the row's time is
// older than the grace (a row of a long request, or this test's fixed clock).
func TestFirstHeldRowOfANewReplicaIsNotSwept(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	for i := range 20 {
		l, _ := heldLedger(pool, pool)
		req := freeReq(acct, 1)
		req.RatePerMin = 100
		charge, _, err := l.Admit(ctx, req)
		pgtest.Must(t, err, "admit")
		pgtest.Must(t, charge.Record(ctx, []usage.Row{streamRow(acct, fmt.Sprintf("first:%d", i))}), "record")
		n, err := usage.SweepHeld(ctx, pool, testGrace)
		pgtest.Must(t, err, "sweep")
		charge.Settle()
		charge.Close()
		l.Close()
		if n != 0 {
			t.Fatalf("replica %d: the sweep withdrew %d rows of a live request", i, n)
		}
	}
}

// That first heartbeat is on the first request's path, so it is bounded like the request's own
// write: on a Postgres that stops answering, the first Record returns within about two seconds
// (the heartbeat's 1 s and the write's 1 s), as the 503 promises, not after the 5 s of a
// background statement as well.
func TestFirstHeartbeatIsBoundedLikeTheRequest(t *testing.T) {
	t.Parallel()
	pool, linked, link := linkedPools(t)
	l, _ := heldLedger(linked, linked)
	defer l.Close()
	acct := newAccount(t, pool, "free")
	charge, _, err := l.Admit(ctx, freeReq(acct, 1))
	pgtest.Must(t, err, "admit")
	link.Hold()
	start := time.Now()
	err = charge.Record(ctx, []usage.Row{streamRow(acct, "silent:0")})
	took := time.Since(start)
	link.Restore()
	charge.Close()
	if err == nil {
		t.Error("Record succeeded on a silent Postgres")
	}
	if took > 3500*time.Millisecond {
		t.Errorf("the first Record took %v on a silent Postgres, want about 2 s (at most 3.5 s on a busy machine; it was 6 s)", took)
	}
}
