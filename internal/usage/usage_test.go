package usage_test

import (
	"context"
	"errors"
	"github.com/mailvet/mailvet/internal/verdict"
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
	"github.com/mailvet/mailvet/internal/usage/usagetest"
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
	if used, _ := usage.MonthUsed(ctx, pool, acct, true, now); used != 18 {
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
	usagetest.SetMonth(t, replicas[0], acct, now, 495, 0)

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
	if used, _ := usage.MonthUsed(ctx, replicas[1], acct, true, now); used != 500 {
		t.Errorf("used %d, want 500", used)
	}
}

// A refused free request takes nothing; a released hold gives its units back.
func TestQuotaExceededAndRelease(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	r := freeReq(acct, 3)
	r.MonthlyCalls, r.RatePerMin = 5, 100
	d, err := usage.Admit(ctx, pool, r)
	if err != nil || d.Hold == uuid.Nil {
		t.Fatalf("%+v %v", d, err)
	}
	_, err = usage.Admit(ctx, pool, r)
	var qe *usage.QuotaExceeded
	if !errors.As(err, &qe) || qe.Used != 3 || qe.Limit != 5 || !qe.Reset.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%v %+v", err, qe)
	}
	if err := usage.Bill(ctx, pool, d.Hold, nil, true); err != nil {
		t.Fatal(err)
	}
	if used, _ := usage.MonthUsed(ctx, pool, acct, true, now); used != 0 {
		t.Errorf("after release: %d", used)
	}
	if c := usagetest.Of(t, pool, acct); c != (usagetest.Counts{}) {
		t.Errorf("after release: %+v", c)
	}
}

func TestSpendCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	usagetest.SetMonth(t, pool, acct, now, 0, 5100)
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
	if _, err := usage.Admit(ctx, pool, r); err != nil {
		t.Fatalf("no cap: %v", err)
	}
	if c := usagetest.Of(t, pool, acct); c.Quota != 0 || c.Billable != 5100 || c.Held != 150+151 {
		t.Fatalf("counts %+v, want no quota units, 5100 billed and both requests held", c)
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
		if err := usage.Bill(ctx, pool, uuid.Nil, rows, false); err != nil {
			t.Fatal(err)
		}
	}
	logged := usagetest.Rows(t, pool, acct)
	if len(logged) != 4 {
		t.Fatalf("logged %d rows, want 4", len(logged))
	}
	if n := usagetest.Count(logged, usagetest.Delivered); n != 3 || logged[0].ItemKey != "req1:0" || logged[0].ErrorClass != "" {
		t.Errorf("%d rows without an error class (first %+v), want the 3 results", n, logged[0])
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
	usagetest.SetMonth(t, pool, free, now, 120, 100)
	usagetest.SetMonth(t, pool, paid, now, 0, 100250)

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

func TestMonthUsedReadsTheCurrentUTCMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	usagetest.SetMonth(t, pool, acct, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), 499, 0)
	usagetest.SetMonth(t, pool, acct, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), 42, 0)

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
		got, err := usage.MonthUsed(ctx, pool, acct, true, tt.now)
		if err != nil || got != tt.want {
			t.Errorf("%s: MonthUsed = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	// Paid tiers count billable verifications, not the quota units of the month's free days:
	// the usage summary's calls_used, one definition (docs/api.md, "Metering").
	usagetest.SetMonth(t, pool, acct, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), 448, 3596)
	if got, err := usage.MonthUsed(ctx, pool, acct, false, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)); err != nil || got != 3596 {
		t.Errorf("paid: MonthUsed = %d, %v; want the 3,596 billable", got, err)
	}
	if got, _ := usage.MonthUsed(ctx, pool, acct, true, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)); got != 448 {
		t.Errorf("free: MonthUsed = %d, want the 448 quota units", got)
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

// An asynchronous job holds its email from its admission until it ends, so sent one after
// another, one-email async requests stop at the cap; a finished job's hold is released in the
// transaction that finishes it, and its room is back.
func TestAsyncJobsCountAgainstTheCap(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 0.01 WHERE id = $1`, acct) // room for 2 at EUR 0.004
	usagetest.SetMonth(t, pool, acct, now, 0, 5000)
	var jobs []uuid.UUID
	admit := func() bool {
		id := uuid.New()
		_, err := usage.Admit(context.Background(), pool, usage.Request{AccountID: acct, Units: 1, RatePerMin: 1000,
			MonthlyCalls: 5000, OverageEUR: 0.004, Now: now, Hold: id})
		if err == nil {
			jobs = append(jobs, id)
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
	// The first job failed internally: its row is not billable, and its hold ends with it.
	failed := usage.FailedRow(usage.Item{Key: "job:" + jobs[0].String(), AccountID: acct, Route: "verify_async"},
		verdict.Result{Email: "x@acme.test"}, nil, "internal")
	if err := usage.Bill(ctx, pool, jobs[0], []usage.Row{failed}, true); err != nil {
		t.Fatal(err)
	}
	if !admit() {
		t.Fatal("a finished job still counts against the cap")
	}
	if c := usagetest.Of(t, pool, acct); c.Billable != 5000 || c.Held != 2 || c.Holds != 2 {
		t.Fatalf("counts %+v, want 5000 billed and two jobs held", c)
	}
}

// Billing the same items again (a redelivered job, a retried statement) counts them once and
// takes their units off the hold once.
func TestBillRetriedCountsOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	d, err := usage.Admit(ctx, pool, freeReq(acct, 4))
	if err != nil {
		t.Fatal(err)
	}
	rows := []usage.Row{resultRow(acct, "r:0", true), resultRow(acct, "r:1", false)}
	for range 3 {
		if err := usage.Bill(ctx, pool, d.Hold, rows, false); err != nil {
			t.Fatal(err)
		}
	}
	if c := usagetest.Of(t, pool, acct); c.Quota != 2 || c.Billable != 1 || c.Daily != 1 || c.Held != 2 || c.Holds != 1 {
		t.Fatalf("counts %+v after billing two rows three times, want 2 units, 1 billable, 2 still held", c)
	}
	if err := usage.Bill(ctx, pool, d.Hold, rows, true); err != nil {
		t.Fatal(err)
	}
	if c := usagetest.Of(t, pool, acct); c.Quota != 2 || c.Billable != 1 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v after the release, want 2 units, 1 billable, nothing held", c)
	}
}

// resultRow is the row of a delivered result of account: billable, or a syntax failure.
func resultRow(acct, key string, billable bool) usage.Row {
	r := usage.Row{ItemKey: key, AccountID: acct, Route: "verify_batch", Status: "deliverable", Billable: true, QuotaUnit: true}
	if !billable {
		r.Status, r.FailedCheck, r.Billable = "invalid", "syntax", false
	}
	return r
}
