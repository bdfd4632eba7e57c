package usage_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// batchRows are n result rows of a batch, keyed prefix:i.
func batchRows(acct, prefix string, n int) []usage.Row {
	rows := make([]usage.Row, n)
	for i := range rows {
		rows[i] = usage.ResultRow(usage.Item{Key: fmt.Sprintf("%s:%d", prefix, i), AccountID: acct, Route: "verify_batch"},
			verdict.Result{Email: fmt.Sprintf("u%d@example.com", i), Status: verdict.StatusDeliverable}, nil)
		rows[i].OccurredAt = now
	}
	return rows
}

// linkedPools are a direct pool and one through a link to Postgres that the test can cut
// (tcpproxy), on one fresh database.
func linkedPools(t *testing.T) (direct, linked *pgxpool.Pool, link *tcpproxy.Proxy) {
	t.Helper()
	dbURL := pgtest.URL(t)
	direct = pgtest.Pool(t, dbURL)
	u, err := url.Parse(dbURL)
	pgtest.Must(t, err, "database URL")
	link, err = tcpproxy.Start(u.Host)
	pgtest.Must(t, err, "proxy")
	t.Cleanup(func() { link.Close() })
	u.Host = link.Addr()
	return direct, pgtest.Pool(t, u.String()), link
}

// lockMonthly holds the account's monthly usage row in another session for hold, as a slow or
// contended Postgres would; it returns once the lock is taken.
func lockMonthly(t *testing.T, pool *pgxpool.Pool, acct string, hold time.Duration) {
	t.Helper()
	taken := make(chan error, 1)
	go func() {
		tx, err := pool.Begin(context.Background())
		if err != nil {
			taken <- err
			return
		}
		defer tx.Rollback(context.Background())
		lctx, cancel := context.WithTimeout(context.Background(), hold+5*time.Second)
		defer cancel()
		if _, err := tx.Exec(lctx, `SELECT 1 FROM usage_monthly WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
			taken <- err
			return
		}
		taken <- nil
		time.Sleep(hold)
		_ = tx.Commit(context.Background())
	}()
	if err := <-taken; err != nil {
		t.Fatal(err)
	}
}

// A write of a request's rows that Postgres refused (here its lock_timeout: the statement rolled
// back) leaves no row, so Close gives the free tier's quota units of those emails back: the
// 503's "nothing was charged" holds for the quota too (before, the units stayed spent).
func TestRolledBackRecordGivesTheQuotaBack(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Pool(t, url)
	impatient := pgtest.Pool(t, url+"&lock_timeout=200ms")
	ledger := usage.NewLedger(impatient, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")

	charge, _, err := ledger.Admit(ctx, freeReq(acct, 3))
	pgtest.Must(t, err, "admit")
	if q, _, _ := monthly(t, pool, acct); q != 3 {
		t.Fatalf("admitted with %d quota units, want 3", q)
	}
	lockMonthly(t, pool, acct, 2*time.Second)
	if err := charge.Record(ctx, batchRows(acct, "refused", 3)); err == nil {
		t.Fatal("Record succeeded past the lock")
	}
	charge.Close() // its refund waits behind the response until the lock is gone
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, b, d := monthly(t, pool, acct)
		if q == 0 && b == 0 && d == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the refused write: quota %d, billable %d, daily %d; want 0 of each", q, b, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A write whose deadline passes while Postgres still holds it (a lock) may commit after the
// request has closed its charge: its rows are looked for again behind the response and removed,
// with their billable counts, and the quota units are given back once. Before, such rows stayed
// billed, held by the live replica, for as long as it ran. The link to Postgres is black-holed
// once the write is sent, so the cancel request pgx sends at the deadline is lost, as in a
// partition, and the write really commits, after Close, when the lock lets go.
func TestRowsOfAWriteThatCommitsAfterCloseAreRemoved(t *testing.T) {
	t.Parallel()
	pool, linked, link := linkedPools(t)
	ledger := usage.NewLedger(linked, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")
	earlier, _, err := ledger.Admit(ctx, freeReq(acct, 5)) // units that stay spent
	pgtest.Must(t, err, "admit earlier usage")
	earlier.Settle()
	earlier.Close()

	charge, _, err := ledger.Admit(ctx, freeReq(acct, 3))
	pgtest.Must(t, err, "admit")
	lockMonthly(t, pool, acct, 2500*time.Millisecond) // longer than the write's 1 s deadline
	go func() { time.Sleep(300 * time.Millisecond); link.Hold() }()
	if err := charge.Record(ctx, batchRows(acct, "late", 3)); err == nil {
		t.Fatal("Record succeeded past the lock")
	}
	charge.Close()
	late := time.Now().Add(5 * time.Second)
	for count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND item_key LIKE 'late:%'`, acct) != 3 {
		if time.Now().After(late) {
			t.Fatal("the write never committed: the test no longer makes a late commit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	link.Restore()
	deadline := time.Now().Add(15 * time.Second)
	for {
		rows := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND item_key LIKE 'late:%'`, acct)
		q, b, _ := monthly(t, pool, acct)
		if rows == 0 && q == 5 && b == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after the late commit: %d of its rows, quota %d, billable %d; want 0 rows, the earlier request's 5 units, 0 billable", rows, q, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A client that hangs up does not cut the write of its rows short (a statement cut off could
// commit after Close looked for its rows): the rows are written, and Close takes them back.
func TestRecordIsNotCutShortByTheClientLeaving(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ledger := usage.NewLedger(pool, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")

	charge, _, err := ledger.Admit(ctx, freeReq(acct, 2))
	pgtest.Must(t, err, "admit")
	gone, cancel := context.WithCancel(ctx)
	cancel()
	pgtest.Must(t, charge.Record(gone, batchRows(acct, "gone", 2)), "record for a client that left")
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 2 {
		t.Fatalf("%d rows written, want 2", n)
	}
	charge.Close()
	if q, b, d := monthly(t, pool, acct); q != 0 || b != 0 || d != 0 {
		t.Errorf("after Close: quota %d, billable %d, daily %d; want 0 of each", q, b, d)
	}
}

// proxiedLedger is a ledger holding its rows, on a link to Postgres that the test can cut, and a
// direct pool for checking; the account already has 5 quota units spent by a settled request.
func proxiedLedger(t *testing.T) (l *usage.Ledger, h *usage.Holds, link *tcpproxy.Proxy, direct *pgxpool.Pool, acct string) {
	t.Helper()
	direct, proxied, link := linkedPools(t)
	acct = newAccount(t, direct, "free")
	log := slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil))
	base := usage.NewLedger(direct, log)
	earlier, _, err := base.Admit(ctx, freeReq(acct, 5))
	pgtest.Must(t, err, "admit earlier usage")
	earlier.Settle()
	earlier.Close()
	base.Close()
	h = usage.NewHolds(proxied, log, usage.HoldOptions{Grace: testGrace})
	return usage.NewLedger(proxied, log).HoldRows(h), h, link, direct, acct
}

// The quota units of a write whose outcome was unknown go back once, even when the write did
// commit and its rows are then swept as a dead replica's: before or after the charge's own
// refund of them lands. Before, each gave them back (5 units spent became 2).
func TestDoubtfulUnitsGoBackOnceWhenTheRowsAreSwept(t *testing.T) {
	t.Parallel()
	t.Run("swept while the replica is cut off, refunded when it heals", func(t *testing.T) {
		t.Parallel()
		l, _, link, direct, acct := proxiedLedger(t)
		charge, _, err := l.Admit(ctx, freeReq(acct, 3))
		pgtest.Must(t, err, "admit")
		lockMonthly(t, direct, acct, 600*time.Millisecond) // the write commits at 0.6 s; its answer is lost
		go func() { time.Sleep(300 * time.Millisecond); link.Hold() }()
		if err := charge.Record(ctx, batchRows(acct, "swept", 3)); err == nil {
			t.Fatal("Record succeeded on a cut link")
		}
		charge.Close()                      // its refund waits behind the response for the link
		time.Sleep(testGrace + time.Second) // the replica's heartbeat lapses
		n, err := usage.SweepHeld(ctx, direct, testGrace)
		pgtest.Must(t, err, "sweep")
		if n != 3 {
			t.Fatalf("the sweep withdrew %d rows, want the 3 that committed", n)
		}
		link.Restore()
		l.Close() // waits for the refund to land
		if q, b, _ := monthly(t, direct, acct); q != 5 || b != 0 {
			t.Errorf("quota %d, billable %d; want the earlier 5 units and 0", q, b)
		}
	})
	t.Run("refunded, then swept after the replica dies", func(t *testing.T) {
		t.Parallel()
		l, h, link, direct, acct := proxiedLedger(t)
		charge, _, err := l.Admit(ctx, freeReq(acct, 3))
		pgtest.Must(t, err, "admit")
		// Commits at 4 s: after Close (1 s) and its removal 1 s later (which the cut link
		// fails), well before the next one (5 s after that).
		lockMonthly(t, direct, acct, 4*time.Second)
		go func() { time.Sleep(300 * time.Millisecond); link.Hold() }()
		if err := charge.Record(ctx, batchRows(acct, "late", 3)); err == nil {
			t.Fatal("Record succeeded past the lock")
		}
		charge.Close()
		waitFor(t, "the late commit", func() bool {
			return count(t, direct, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND item_key LIKE 'late:%'`, acct) == 3
		})
		link.Restore()
		waitFor(t, "the refund", func() bool { q, _, _ := monthly(t, direct, acct); return q == 5 })
		l.Abandon() // killed before its late removals find the rows
		pgtest.Exec(t, direct, `UPDATE api_replicas SET alive_until = now() - interval '1 hour' WHERE id = $1`, h.Replica())
		n, err := usage.SweepHeld(ctx, direct, testGrace)
		pgtest.Must(t, err, "sweep")
		if n != 3 {
			t.Fatalf("the sweep withdrew %d rows, want the 3 that committed late", n)
		}
		if q, b, _ := monthly(t, direct, acct); q != 5 || b != 0 {
			t.Errorf("quota %d, billable %d; want the earlier 5 units and 0", q, b)
		}
	})
}
