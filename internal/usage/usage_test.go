package usage_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/usage"
)

var ctx = context.Background()

func newAccount(t *testing.T, pool *pgxpool.Pool, tier string) string {
	t.Helper()
	id := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, $2)`, id, tier)
	return id
}

var now = time.Date(2026, 11, 22, 10, 30, 15, 0, time.UTC)

func freeReq(acct string, units int) usage.Request {
	return usage.Request{AccountID: acct, Free: true, Units: units, RatePerMin: 10, MonthlyCalls: 500, Now: now}
}

func TestRateLimitWindow(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")

	d, err := usage.Admit(ctx, pool, freeReq(acct, 4))
	if err != nil || d.Remaining != 6 || d.Limit != 10 || !d.Reset.Equal(now.Truncate(time.Minute).Add(time.Minute)) {
		t.Fatalf("first: %+v %v", d, err)
	}
	if _, err := usage.Admit(ctx, pool, freeReq(acct, 4)); err != nil {
		t.Fatal(err)
	}
	_, err = usage.Admit(ctx, pool, freeReq(acct, 4))
	var rl *usage.RateLimited
	if !errors.As(err, &rl) || rl.Used != 8 || rl.Limit != 10 {
		t.Fatalf("third: %v", err)
	}
	// A batch that is larger than the whole limit never passes, even in an empty window.
	next := freeReq(acct, 11)
	next.Now = now.Add(time.Minute)
	if _, err := usage.Admit(ctx, pool, next); !errors.As(err, &rl) {
		t.Fatalf("oversized batch: %v", err)
	}
	// The next window starts afresh.
	next.Units = 10
	if d, err := usage.Admit(ctx, pool, next); err != nil || d.Remaining != 0 {
		t.Fatalf("next window: %+v %v", d, err)
	}
	// Quota units are not taken by a rate-limited request.
	if used, _ := usage.QuotaUsed(ctx, pool, acct, now); used != 18 {
		t.Errorf("quota used %d, want 18", used)
	}
}

// Two pools stand for two API replicas; 20 concurrent single-email requests against 5 remaining
// quota units admit exactly 5.
func TestQuotaAdmissionIsAtomicAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	replicas := []*pgxpool.Pool{pgtest.Pool(t, dbURL), pgtest.Pool(t, dbURL)}
	acct := newAccount(t, replicas[0], "free")
	pgtest.Exec(t, replicas[0], `INSERT INTO usage_monthly (account_id, month, quota_units) VALUES ($1, $2, 495)`, acct, usage.MonthStart(now))

	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := freeReq(acct, 1)
			r.RatePerMin = 1000
			_, err := usage.Admit(ctx, replicas[i%2], r)
			var qe *usage.QuotaExceeded
			switch {
			case err == nil:
				admitted.Add(1)
			case errors.As(err, &qe):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if admitted.Load() != 5 || refused.Load() != 15 {
		t.Fatalf("admitted %d refused %d, want 5 and 15", admitted.Load(), refused.Load())
	}
	if used, _ := usage.QuotaUsed(ctx, replicas[1], acct, now); used != 500 {
		t.Errorf("used %d, want 500", used)
	}
}

func TestQuotaExceededAndRefund(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 3)
	r.MonthlyCalls, r.RatePerMin = 5, 100
	d, err := usage.Admit(ctx, pool, r)
	if err != nil || d.QuotaCharged != 3 {
		t.Fatalf("%+v %v", d, err)
	}
	_, err = usage.Admit(ctx, pool, r)
	var qe *usage.QuotaExceeded
	if !errors.As(err, &qe) || qe.Used != 3 || qe.Limit != 5 || !qe.Reset.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%v %+v", err, qe)
	}
	if err := usage.Refund(ctx, pool, d); err != nil {
		t.Fatal(err)
	}
	if used, _ := usage.QuotaUsed(ctx, pool, acct, now); used != 0 {
		t.Errorf("after refund: %d", used)
	}
}

func TestSpendCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, billable) VALUES ($1, $2, 5100)`, acct, usage.MonthStart(now))
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 1.00 WHERE id = $1`, acct)
	r := usage.Request{AccountID: acct, Units: 150, RatePerMin: 1000, MonthlyCalls: 5000, OverageEUR: 0.004, Now: now}
	// 5100 + 150 billable = 250 over: 1.00 EUR, exactly the cap.
	if _, err := usage.Admit(ctx, pool, r); err != nil {
		t.Fatalf("at the cap: %v", err)
	}
	r.Units = 151
	_, err := usage.Admit(ctx, pool, r)
	var sc *usage.SpendCapExceeded
	if !errors.As(err, &sc) || sc.CurrentOverageEUR != 0.4 || *sc.HardCapEUR != 1.0 {
		t.Fatalf("over the cap: %v %+v", err, sc)
	}
	// No cap: anything goes, and paid tiers take no quota units.
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = NULL WHERE id = $1`, acct)
	if d, err := usage.Admit(ctx, pool, r); err != nil || d.QuotaCharged != 0 {
		t.Fatalf("no cap: %+v %v", d, err)
	}
}

func TestRecordIsIdempotentAndCounts(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	yesterday := now.Add(-24 * time.Hour)
	rows := []usage.Row{
		{ItemKey: "req1:0", AccountID: acct, Route: "verify", Status: "deliverable", Billable: true, QuotaUnit: true, OccurredAt: now, Snapshot: []byte(`{"status":"deliverable"}`)},
		{ItemKey: "req1:1", AccountID: acct, Route: "verify", Status: "invalid", FailedCheck: "syntax", QuotaUnit: true, OccurredAt: now},
		{ItemKey: "req1:2", AccountID: acct, Route: "verify", Status: "invalid", FailedCheck: "disposable", Billable: true, QuotaUnit: true, OccurredAt: yesterday},
		{ItemKey: "req2:rejected", AccountID: acct, Route: "verify", FailedCheck: "rate_limit_exceeded", ErrorClass: "rate_limit", OccurredAt: now},
	}
	for range 2 { // the second time is a redelivery: nothing is logged or counted twice
		if err := usage.Record(ctx, pool, rows); err != nil {
			t.Fatal(err)
		}
	}
	var logged int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct).Scan(&logged); err != nil || logged != 4 {
		t.Fatalf("logged %d, %v", logged, err)
	}
	var class *string
	if err := pool.QueryRow(ctx, `SELECT error_class FROM usage_log WHERE item_key = 'req1:0'`).Scan(&class); err != nil || class != nil {
		t.Errorf("success error_class = %v, %v; want null", class, err)
	}
	days, err := usage.Daily(ctx, pool, acct, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 30 || days[29].Date != "2026-11-22" || days[29].Calls != 1 || days[28].Calls != 1 || days[0].Date != "2026-10-24" || days[0].Calls != 0 {
		t.Fatalf("days: first %+v, last two %+v", days[0], days[28:])
	}
	s, err := usage.Summarize(ctx, pool, acct, "builder", false, 5000, 0.004, now)
	if err != nil || s.CallsUsed != 2 || s.CallsRemaining != 4998 || s.OverageCalls != 0 {
		t.Fatalf("summary %+v %v", s, err)
	}
}

func TestSummaryFreeUsesQuotaAndPaidPricesOverage(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	free := newAccount(t, pool, "free")
	paid := newAccount(t, pool, "scale")
	m := usage.MonthStart(now)
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, quota_units, billable) VALUES ($1, $3, 120, 100), ($2, $3, 0, 100250)`, free, paid, m)

	s, err := usage.Summarize(ctx, pool, free, "free", true, 500, 0, now)
	if err != nil || s.CallsUsed != 120 || s.CallsRemaining != 380 || s.EstimatedCostEUR != 0 {
		t.Fatalf("free %+v %v", s, err)
	}
	if !s.Period.Start.Equal(m) || !s.Period.End.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("period %+v", s.Period)
	}
	s, err = usage.Summarize(ctx, pool, paid, "scale", false, 100000, 0.002, now)
	if err != nil || s.CallsUsed != 100250 || s.OverageCalls != 250 || s.CallsRemaining != 0 || s.EstimatedCostEUR != 0.5 {
		t.Fatalf("paid %+v %v", s, err)
	}
}

// With Postgres unreachable, the free-tier quota check fails as ErrQuotaCheck (a 503), quickly.
func TestAdmitDatastoreDown(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	u, _ := url.Parse(dbURL)
	p, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	pool := pgtest.Pool(t, u.String())
	acct := newAccount(t, pool, "free")
	p.Cut()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = usage.Admit(c, pool, freeReq(acct, 1))
	if !errors.Is(err, usage.ErrUnavailable) && !errors.Is(err, usage.ErrQuotaCheck) {
		t.Fatalf("err = %v", err)
	}
}

func TestPruneRateWindows(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "scale")
	for _, at := range []time.Time{now.Add(-5 * time.Minute), now.Add(-2 * time.Minute), now} {
		r := freeReq(acct, 1)
		r.Free, r.Now = false, at
		if _, err := usage.Admit(ctx, pool, r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := usage.PruneRateWindows(ctx, pool, now)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	var left int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM rate_windows`).Scan(&left)
	if left != 1 {
		t.Errorf("%d windows left, want the current one", left)
	}
}

func TestQuotaUsedReadsTheCurrentUTCMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, quota_units) VALUES
		($1, '2026-10-01', 499), ($1, '2026-11-01', 42)`, acct)

	// 00:30 on 1 December in UTC+2 is still 30 November in UTC.
	late := time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("UTC+2", 2*3600))
	tests := []struct {
		name string
		now  time.Time
		want int
	}{
		{"mid month", time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC), 42},
		{"UTC month decides, not local", late, 42},
		{"previous month", time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC), 499},
		{"month without a row", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 0},
	}
	for _, tt := range tests {
		got, err := usage.QuotaUsed(ctx, pool, acct, tt.now)
		if err != nil || got != tt.want {
			t.Errorf("%s: QuotaUsed = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
}

// count is a one-number query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// monthly is the account's (quota_units, billable) for now's month, and its daily billable count.
func monthly(t *testing.T, pool *pgxpool.Pool, acct string) (quota, billable, daily int) {
	t.Helper()
	quota = count(t, pool, `SELECT coalesce(sum(quota_units), 0) FROM usage_monthly WHERE account_id = $1 AND month = $2`, acct, usage.MonthStart(now))
	billable = count(t, pool, `SELECT coalesce(sum(billable), 0) FROM usage_monthly WHERE account_id = $1 AND month = $2`, acct, usage.MonthStart(now))
	daily = count(t, pool, `SELECT coalesce(sum(billable), 0) FROM usage_daily WHERE account_id = $1 AND day = '2026-11-22'`, acct)
	return
}

// Rows handed to Admit are written and counted by the admission statement only when the request
// is admitted, and Refund takes back exactly the rows that still wait for a verdict.
func TestAdmitWritesRowsOnlyWhenAdmitted(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 1)
	r.MonthlyCalls = 2

	// A syntax failure decided locally: complete, a quota unit, not billable.
	r.Rows = []usage.Row{{ItemKey: "a:0", AccountID: acct, Route: "verify", Status: "invalid", FailedCheck: "syntax", QuotaUnit: true}}
	if _, err := usage.Admit(ctx, pool, r); err != nil {
		t.Fatal(err)
	}
	// An address for the worker fleet: billable, its verdict still to come.
	r.Rows = []usage.Row{{ItemKey: "b:0", AccountID: acct, Route: "verify", EmailDomain: "acme.test", Billable: true, QuotaUnit: true}}
	d, err := usage.Admit(ctx, pool, r)
	if err != nil || len(d.Logged) != 1 || d.Logged[0] != "b:0" || d.QuotaCharged != 1 {
		t.Fatalf("%+v %v", d, err)
	}
	if q, b, day := monthly(t, pool, acct); q != 2 || b != 1 || day != 1 {
		t.Fatalf("after two admissions: quota %d billable %d daily %d, want 2 1 1", q, b, day)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND occurred_at = $2`, acct, now); n != 2 {
		t.Fatalf("%d rows at the admission time, want 2", n)
	}
	// The quota is spent: the third request is refused and writes nothing.
	r.Rows = []usage.Row{pendingRow(acct, "c:0")}
	var qe *usage.QuotaExceeded
	if _, err := usage.Admit(ctx, pool, r); !errors.As(err, &qe) {
		t.Fatalf("third: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key = 'c:0'`); n != 0 {
		t.Fatal("a refused request's row was written")
	}
	// The fleet failed for b: its row, its billable count and its quota unit go back.
	if err := usage.Refund(ctx, pool, d); err != nil {
		t.Fatal(err)
	}
	if q, b, day := monthly(t, pool, acct); q != 1 || b != 0 || day != 0 {
		t.Fatalf("after refund: quota %d billable %d daily %d, want 1 0 0", q, b, day)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("%d rows after refund, want the syntax failure's only", n)
	}
}

// A key that is already logged fails the whole admission: nothing is charged or counted twice.
func TestAdmitRowsWithAUsedKeyFail(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 1)
	r.Rows = []usage.Row{pendingRow(acct, "same")}
	if _, err := usage.Admit(ctx, pool, r); err != nil {
		t.Fatal(err)
	}
	if _, err := usage.Admit(ctx, pool, r); !errors.Is(err, usage.ErrQuotaCheck) {
		t.Fatalf("second admission with the same key: %v", err)
	}
	if q, b, _ := monthly(t, pool, acct); q != 1 || b != 1 {
		t.Fatalf("quota %d billable %d, want 1 1", q, b)
	}
}

// On paid tiers the rows are written with the spend-cap check: at the cap yes, over it no.
func TestAdmitRowsAndSpendCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, billable) VALUES ($1, $2, 5249)`, acct, usage.MonthStart(now))
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 1.00 WHERE id = $1`, acct)
	r := usage.Request{AccountID: acct, Units: 1, RatePerMin: 1000, MonthlyCalls: 5000, OverageEUR: 0.004, Now: now,
		Rows: []usage.Row{pendingRow(acct, "p:0")}}
	if _, err := usage.Admit(ctx, pool, r); err != nil { // 250 over: exactly 1.00 EUR
		t.Fatalf("at the cap: %v", err)
	}
	r.Rows = []usage.Row{pendingRow(acct, "p:1")}
	var sc *usage.SpendCapExceeded
	if _, err := usage.Admit(ctx, pool, r); !errors.As(err, &sc) || sc.CurrentOverageEUR != 1.0 {
		t.Fatalf("over the cap: %v %+v", err, sc)
	}
	if q, b, day := monthly(t, pool, acct); q != 0 || b != 5250 || day != 1 {
		t.Fatalf("quota %d billable %d daily %d, want 0 5250 1", q, b, day)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// Verdicts fills in rows written without one, once; a row with a verdict is no longer refundable.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "scale")
	r := freeReq(acct, 3)
	r.Free = false
	for _, k := range []string{"v:0", "v:1", "v:2"} {
		r.Rows = append(r.Rows, pendingRow(acct, k))
	}
	d, err := usage.Admit(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	w := usage.NewVerdicts(pool, slog.New(slog.DiscardHandler))
	w.Add(usage.Verdict{ItemKey: "v:0", Status: "deliverable", Snapshot: []byte(`{"status":"deliverable"}`)})
	w.Add(usage.Verdict{ItemKey: "v:1", Status: "undeliverable", FailedCheck: "smtp"})
	w.Add(usage.Verdict{ItemKey: "v:0", Status: "unknown"}) // a second verdict does not overwrite the first
	w.Close()
	w.Add(usage.Verdict{ItemKey: "v:2", Status: "risky"}) // after Close: written at once
	got := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT item_key, status || '/' || coalesce(failed_check, '') || '/' || coalesce(snapshot->>'status', '')
		FROM usage_log WHERE account_id = $1`, acct)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		got[k] = v
	}
	if got["v:0"] != "deliverable//deliverable" || got["v:1"] != "undeliverable/smtp/" || got["v:2"] != "risky//" {
		t.Fatalf("verdicts: %v", got)
	}
	// Every row has its verdict: a late refund removes nothing.
	if err := usage.Refund(ctx, pool, d); err != nil {
		t.Fatal(err)
	}
	if _, b, _ := monthly(t, pool, acct); b != 3 || len(got) != 3 {
		t.Fatalf("billable %d, rows %d after a late refund; want 3 and 3", b, len(got))
	}
}

// Room is the least of the rate window's remaining units and the quota left or the emails the
// spend cap still allows.
func TestDecisionRoom(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	free := newAccount(t, pool, "free")
	r := freeReq(free, 2)
	r.MonthlyCalls = 5
	if d, err := usage.Admit(ctx, pool, r); err != nil || d.Room != 3 { // rate 8 left, quota 3
		t.Fatalf("free: %+v %v", d, err)
	}
	r.MonthlyCalls = 500
	if d, err := usage.Admit(ctx, pool, r); err != nil || d.Room != 6 { // rate 6 left, quota 496
		t.Fatalf("free: %+v %v", d, err)
	}

	paid := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 0.02 WHERE id = $1`, paid)
	p := usage.Request{AccountID: paid, Units: 1, RatePerMin: 100, MonthlyCalls: 10, OverageEUR: 0.004, Now: now}
	// The cap allows 10 + 5 billable emails: after this one, 14 more.
	if d, err := usage.Admit(ctx, pool, p); err != nil || d.Room != 14 {
		t.Fatalf("paid with a cap: %+v %v", d, err)
	}
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = NULL WHERE id = $1`, paid)
	if d, err := usage.Admit(ctx, pool, p); err != nil || d.Room != 98 {
		t.Fatalf("paid without a cap: %+v %v", d, err)
	}
}

func TestHeadroom(t *testing.T) {
	t.Parallel()
	h := usage.NewHeadroom()
	if h.Take("a", now) {
		t.Fatal("room without a decision")
	}
	h.Note("a", now, usage.Decision{Room: 2}, nil)
	if !h.Take("a", now) || !h.Take("a", now.Add(10*time.Second)) || h.Take("a", now) {
		t.Fatal("two units of room, taken once each")
	}
	h.Note("a", now, usage.Decision{Room: 5}, nil)
	if h.Take("a", now.Add(time.Minute)) {
		t.Fatal("room carried into the next window")
	}
	h.Note("a", now, usage.Decision{Room: 5}, &usage.RateLimited{})
	if h.Take("a", now) || h.Take("b", now) {
		t.Fatal("room after a refusal, or for another account")
	}
}

// pendingRow is the row of a sync verify that waits for the worker fleet: billable, a quota unit,
// no verdict yet.
func pendingRow(acct, key string) usage.Row {
	return usage.Row{ItemKey: key, AccountID: acct, Route: "verify", Billable: true, QuotaUnit: true}
}

// An async verification writes its billable row only when its job completes, so its admission
// counts the account's unfinished jobs as billed, as it counts a running list's remaining
// addresses: sent one after another, one-email async requests stop at the cap (before, 50 of 50
// passed a cap with room for 2). A finished job stops counting.
func TestAsyncJobsCountAgainstTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 0.01 WHERE id = $1`, acct) // room for 2 at EUR 0.004
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, billable) VALUES ($1, $2, 5000)`, acct, usage.MonthStart(now))
	admit := func() bool {
		_, err := usage.Admit(context.Background(), pool, usage.Request{AccountID: acct, Units: 1, RatePerMin: 1000,
			MonthlyCalls: 5000, OverageEUR: 0.004, Now: now})
		if err == nil {
			// The API stores the job after its admission.
			pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state)
				VALUES (gen_random_uuid(), $1, 'x@acme.test', 'https://hooks.example.com/x', 'pending')`, acct)
		}
		return err == nil
	}
	admitted := 0
	for range 50 {
		if admit() {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d of 50 async requests with room for 2 under the cap", admitted)
	}
	pgtest.Exec(t, pool, `UPDATE jobs SET state = 'failed' WHERE account_id = $1`, acct) // finished, nothing billed
	if !admit() {
		t.Fatal("finished jobs still count against the cap")
	}
}

// A refund whose statement committed but whose answer was lost is retried: with its refund id,
// the units of emails that never had a row go back once, not once per try.
func TestRefundRetriedCountsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	d, err := usage.Admit(ctx, pool, freeReq(acct, 4))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE usage_monthly SET quota_units = quota_units + 6 WHERE account_id = $1`, acct) // earlier usage
	d.RefundID = uuid.New()
	for range 3 {
		if err := usage.Refund(ctx, pool, d); err != nil {
			t.Fatal(err)
		}
	}
	if q, _, _ := monthly(t, pool, acct); q != 6 {
		t.Fatalf("quota units %d after a refund of 4 tried 3 times, want 6", q)
	}
}
