package usage_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

var (
	lastTick  = time.Date(2026, 11, 30, 23, 59, 59, 900_000_000, time.UTC) // admitted here
	afterTurn = time.Date(2026, 12, 1, 0, 0, 0, 100_000_000, time.UTC)     // delivered here
)

// A paid request admitted in the last tenth of a second of November and delivered after midnight
// is billed to November (docs/api.md, "Metering"): November's summary, November's spend cap and
// December's all read the same month row, so they agree. Only GET /usage, which counts results on
// the UTC day they were delivered, shows it on 1 December (docs/api.md, "GET /v1/management/usage").
func TestPaidRequestAcrossMidnightIsBilledToItsAdmissionMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	pgtest.Exec(t, pool, `UPDATE accounts SET hard_cap_eur = 2 WHERE id = $1`, acct) // 2 calls at EUR 1 past the 10 included
	usagetest.SetMonth(t, pool, acct, lastTick, 0, 10)
	req := func(units int, at time.Time) usage.Request {
		return usage.Request{AccountID: acct, Units: units, RatePerMin: 100, MonthlyCalls: 10, OverageEUR: 1, Now: at}
	}

	d, err := usage.Admit(ctx, pool, req(2, lastTick))
	if err != nil {
		t.Fatal(err)
	}
	// November's cap is full while the request runs; December's is untouched by it.
	var sc *usage.SpendCapExceeded
	if _, err := usage.Admit(ctx, pool, req(1, lastTick)); !errors.As(err, &sc) || !sc.Reset.Equal(usage.MonthStart(afterTurn)) {
		t.Fatalf("November after the hold: %v, want 402 with reset_at 1 December", err)
	}
	dec, err := usage.Admit(ctx, pool, req(12, afterTurn))
	if err != nil {
		t.Fatalf("December: %v, want its whole room of 12", err)
	}

	rows := []usage.Row{resultRow(acct, "turn:0", true), resultRow(acct, "turn:1", true)}
	for i := range rows {
		rows[i].OccurredAt = afterTurn
	}
	if err := usage.Bill(ctx, pool, d.Hold, rows, true); err != nil {
		t.Fatal(err)
	}
	if err := usage.Bill(ctx, pool, dec.Hold, nil, true); err != nil {
		t.Fatal(err)
	}

	nov, err := usage.Summarize(ctx, pool, acct, "builder", false, 10, 1, lastTick)
	if err != nil || nov.CallsUsed != 12 || nov.OverageCalls != 2 || nov.EstimatedCostEUR != 2 {
		t.Fatalf("November summary %+v %v, want 12 used, 2 over, EUR 2", nov, err)
	}
	decSum, err := usage.Summarize(ctx, pool, acct, "builder", false, 10, 1, afterTurn)
	if err != nil || decSum.CallsUsed != 0 || decSum.OverageCalls != 0 {
		t.Fatalf("December summary %+v %v, want nothing", decSum, err)
	}
	days, err := usage.Daily(ctx, pool, acct, afterTurn)
	if err != nil || days[len(days)-1] != (usage.Day{Date: "2026-12-01", Calls: 2}) {
		t.Fatalf("GET /usage's last day %+v %v, want the 2 results on their delivery day", days[len(days)-1], err)
	}
}

// The free quota across midnight: a request admitted at 23:59:59.9 uses November's quota, held
// until it is delivered after midnight, and never December's, so December's summary, December's
// quota check and the refusal's used count agree.
func TestFreeRequestAcrossMidnightUsesItsAdmissionMonth(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	usagetest.SetMonth(t, pool, acct, lastTick, 3, 3)
	req := func(units int, at time.Time) usage.Request {
		r := freeReq(acct, units)
		r.MonthlyCalls, r.Now = 5, at
		return r
	}
	d, err := usage.Admit(ctx, pool, req(2, lastTick))
	if err != nil {
		t.Fatal(err)
	}
	var qe *usage.QuotaExceeded
	if _, err := usage.Admit(ctx, pool, req(1, lastTick)); !errors.As(err, &qe) || qe.Used != 5 || !qe.Reset.Equal(usage.MonthStart(afterTurn)) {
		t.Fatalf("November after the hold: %v, want 429 at 5 used, reset_at 1 December", err)
	}
	if _, err := usage.Admit(ctx, pool, req(5, afterTurn)); err != nil {
		t.Fatalf("December while November's request still runs: %v, want its whole quota", err)
	}
	row := resultRow(acct, "turn:0", false) // a syntax failure: a quota unit, not billable
	row.OccurredAt = afterTurn
	if err := usage.Bill(ctx, pool, d.Hold, []usage.Row{row}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := usage.Admit(ctx, pool, req(1, afterTurn)); !errors.As(err, &qe) || qe.Used != 5 {
		t.Fatalf("December at its quota: %v, want 429 at 5 used", err)
	}
	for _, c := range []struct {
		at   time.Time
		used int
	}{{lastTick, 4}, {afterTurn, 5}} { // November: 3 + the one delivered; December: 5 held
		s, err := usage.Summarize(ctx, pool, acct, "free", true, 5, 0, c.at)
		if err != nil || s.CallsUsed != c.used || s.CallsRemaining != 5-c.used || s.OverageCalls != 0 {
			t.Errorf("summary at %v: %+v %v, want %d used", c.at, s, err, c.used)
		}
	}
}

// On the free tier the summary never shows overage: the free tier has none, and admission
// refuses rather than charge past the quota (docs/api.md, "GET /v1/management/usage/summary").
// The month can count more than the free quota when the account was downgraded while a paid
// request or list still held room, or when the operator lowered the quota during the month.
func TestFreeSummaryShowsNoOverage(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "builder")
	list := usage.Request{AccountID: acct, Units: 800, MonthlyCalls: 5000, OverageEUR: 0.004, Now: now, NoRate: true}
	if _, err := usage.Admit(ctx, pool, list); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, pool, `UPDATE accounts SET tier = 'free' WHERE id = $1`, acct) // the downgrade
	usagetest.SetMonth(t, pool, acct, now, 40, 0)

	s, err := usage.Summarize(ctx, pool, acct, "free", true, 500, 0, now)
	if err != nil || s.CallsUsed != 840 || s.CallsRemaining != 0 || s.OverageCalls != 0 || s.EstimatedCostEUR != 0 {
		t.Fatalf("free summary %+v %v, want 840 used, 0 remaining, no overage", s, err)
	}
	var qe *usage.QuotaExceeded
	if _, err := usage.Admit(ctx, pool, freeReq(acct, 1)); !errors.As(err, &qe) || qe.Used != 840 {
		t.Fatalf("admission: %v, want 429 at the summary's 840 used", err)
	}
}

// The sweep takes the month rows of the holds it ends in account order, as admission groups and
// bills do (docs/architecture.md, "Metering and admission"), so it cannot deadlock with them: an
// admission group that holds the first account's month row and then takes the others' waits for
// nothing the sweep holds, and the sweep ends every expired hold once the group commits.
func TestExpireTakesMonthRowsInAccountOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	var accts []string
	for range 16 {
		acct := newAccount(t, pool, "scale")
		accts = append(accts, acct)
		r := usage.Request{AccountID: acct, Units: 1, MonthlyCalls: 100, Now: now, NoRate: true, Lifetime: time.Millisecond}
		if _, err := usage.Admit(ctx, pool, r); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(accts)
	time.Sleep(20 * time.Millisecond)

	group, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer group.Rollback(ctx) //nolint:errcheck // committed below; this covers a failed test
	admit := func(acct string) {
		t.Helper()
		r := usage.Request{AccountID: acct, Units: 1, MonthlyCalls: 100, Now: now, NoRate: true, Lifetime: time.Minute}
		if _, err := usage.Admit(ctx, group, r); err != nil {
			t.Fatalf("admission of %s: %v", acct, err)
		}
	}
	admit(accts[0])
	type swept struct {
		n   int
		err error
	}
	done := make(chan swept, 1)
	go func() {
		n, err := usage.Expire(ctx, pool)
		done <- swept{n, err}
	}()
	waitForLockWait(t, pool)
	for _, acct := range accts[1:] {
		admit(acct)
	}
	if err := group.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s := <-done; s.err != nil || s.n != len(accts) {
		t.Fatalf("sweep: %d holds ended, %v; want all %d", s.n, s.err, len(accts))
	}
	for _, acct := range accts {
		if c := usagetest.Of(t, pool, acct); c.Held != 1 || c.Holds != 1 {
			t.Errorf("%s: %+v, want only the group's hold", acct, c)
		}
	}
}

// waitForLockWait waits until a statement on pool waits for a row lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("no statement waits for a lock")
}
