package usage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// groups is a BatchDB on a real pool that notes the size of every batch it sends, so that a test
// can see that requests were in fact admitted together.
type groups struct {
	*pgxpool.Pool
	mu    sync.Mutex
	sizes []int
}

func (g *groups) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	g.mu.Lock()
	g.sizes = append(g.sizes, b.Len())
	g.mu.Unlock()
	return g.Pool.SendBatch(ctx, b)
}

// largest is the size of the largest batch sent.
func (g *groups) largest() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, s := range g.sizes {
		n = max(n, s)
	}
	return n
}

func newAdmitter(t *testing.T, db usage.BatchDB, window time.Duration) *usage.Admitter {
	t.Helper()
	a := usage.NewAdmitter(db, window, func(_ string, hold uuid.UUID) {
		if err := usage.Bill(context.Background(), db, hold, nil, true); err != nil {
			t.Errorf("release %s: %v", hold, err)
		}
	})
	t.Cleanup(a.Close)
	return a
}

// outcome tallies the answers of concurrent admissions.
type outcome struct {
	mu                          sync.Mutex
	admitted, rate, quota, capX int
	other                       []error
}

func (o *outcome) note(err error) {
	var (
		rl *usage.RateLimited
		qe *usage.QuotaExceeded
		sc *usage.SpendCapExceeded
	)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case err == nil:
		o.admitted++
	case errors.As(err, &rl):
		o.rate++
	case errors.As(err, &qe):
		o.quota++
	case errors.As(err, &sc):
		o.capX++
	default:
		o.other = append(o.other, err)
	}
}

// burst runs n admissions of req(i) at once and tallies them.
func burst(a *usage.Admitter, n int, req func(i int) usage.Request) *outcome {
	var (
		o     outcome
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := a.Admit(ctx, req(i))
			o.note(err)
		}()
	}
	close(start)
	wg.Wait()
	return &o
}

// Many concurrent requests of one free account at the edge of its quota and of its rate limit:
// exactly the limit is admitted, the refusals are the same errors as Admit's, and holds are
// made for the admitted requests only.
func TestAdmitterIsExactAtTheLimit(t *testing.T) {
	t.Parallel()
	db := &groups{Pool: pgtest.New(t)}
	a := newAdmitter(t, db, 5*time.Millisecond)

	quotaAcct := newAccount(t, db.Pool, "free")
	usagetest.SetMonth(t, db.Pool, quotaAcct, now, 480, 0)
	o := burst(a, 100, func(i int) usage.Request {
		r := freeReq(quotaAcct, 1)
		r.RatePerMin = 1000
		return r
	})
	if o.admitted != 20 || o.quota != 80 || len(o.other) > 0 || o.rate > 0 {
		t.Fatalf("quota: admitted %d, quota refusals %d, rate %d, other %v; want 20 and 80", o.admitted, o.quota, o.rate, o.other)
	}
	if c := usagetest.Of(t, db.Pool, quotaAcct); c.Quota != 480 || c.Held != 20 || c.Holds != 20 {
		t.Fatalf("counts %+v, want 480 delivered and one hold per admitted request (20)", c)
	}

	rateAcct := newAccount(t, db.Pool, "free")
	o = burst(a, 100, func(int) usage.Request {
		r := freeReq(rateAcct, 1)
		r.RatePerMin = 30
		return r
	})
	if o.admitted != 30 || o.rate != 70 || len(o.other) > 0 {
		t.Fatalf("rate: admitted %d, refused %d, other %v; want 30 and 70", o.admitted, o.rate, o.other)
	}
	// A rate refusal carries what Admit's does: the limit, the window's count and its end.
	r := freeReq(rateAcct, 1)
	r.RatePerMin = 30
	_, err := a.Admit(ctx, r)
	var rl *usage.RateLimited
	if !errors.As(err, &rl) || rl.Limit != 30 || rl.Used != 30 || !rl.Reset.Equal(now.Truncate(time.Minute).Add(time.Minute)) {
		t.Fatalf("refusal after the burst: %v %+v", err, rl)
	}
	if db.largest() < 2 {
		t.Fatalf("batches %v: the requests were never grouped", db.sizes)
	}
}

// A paid account at its spend cap: concurrent requests admitted together never pass the cap.
func TestAdmitterSpendCap(t *testing.T) {
	t.Parallel()
	db := &groups{Pool: pgtest.New(t)}
	a := newAdmitter(t, db, 5*time.Millisecond)
	acct := newAccount(t, db.Pool, "builder")
	// 5,000 included; 1.00 EUR at 0.004 EUR a call is 250 calls over: 10 left.
	usagetest.SetMonth(t, db.Pool, acct, now, 0, 5240)
	pgtest.Exec(t, db.Pool, `UPDATE accounts SET hard_cap_eur = 1.00 WHERE id = $1`, acct)
	o := burst(a, 60, func(i int) usage.Request {
		return usage.Request{AccountID: acct, Units: 1, RatePerMin: 1000, MonthlyCalls: 5000, OverageEUR: 0.004, Now: now}
	})
	if o.admitted != 10 || o.capX != 50 || len(o.other) > 0 {
		t.Fatalf("admitted %d, cap refusals %d, other %v; want 10 and 50", o.admitted, o.capX, o.other)
	}
	if c := usagetest.Of(t, db.Pool, acct); c.Billable+c.Held != 5250 {
		t.Fatalf("counts %+v: billed and held %d, want 5250 (the cap)", c, c.Billable+c.Held)
	}
}

// Requests of several accounts, each with its own limit, admitted in the same groups: each
// account gets exactly its own limit.
func TestAdmitterMixedAccounts(t *testing.T) {
	t.Parallel()
	db := &groups{Pool: pgtest.New(t)}
	a := newAdmitter(t, db, 5*time.Millisecond)
	accts := make([]string, 4)
	for i := range accts {
		accts[i] = newAccount(t, db.Pool, "free")
	}
	limit := func(k int) int { return 5 + 7*k } // 5, 12, 19, 26
	o := burst(a, 160, func(i int) usage.Request {
		k := i % len(accts)
		r := freeReq(accts[k], 1)
		r.RatePerMin = limit(k)
		return r
	})
	if o.admitted != 5+12+19+26 || len(o.other) > 0 {
		t.Fatalf("admitted %d (other %v), want %d", o.admitted, o.other, 5+12+19+26)
	}
	for k, acct := range accts {
		if c := usagetest.Of(t, db.Pool, acct); c.Holds != limit(k) || c.Held != limit(k) {
			t.Errorf("account %d: %+v, want %d holds of one unit", k, c, limit(k))
		}
	}
	if db.largest() < 2 {
		t.Fatalf("batches %v: the requests were never grouped", db.sizes)
	}
}

// One request whose statement fails (its hold id is taken already) gets Admit's error; the
// others of its group are admitted as if it had not been there.
func TestAdmitterOneFailureDoesNotFailTheGroup(t *testing.T) {
	t.Parallel()
	db := &groups{Pool: pgtest.New(t)}
	a := newAdmitter(t, db, 20*time.Millisecond)
	acct := newAccount(t, db.Pool, "free")
	r := freeReq(acct, 1)
	r.RatePerMin = 1000
	r.Hold = uuid.New()
	if _, err := usage.Admit(ctx, db.Pool, r); err != nil {
		t.Fatal(err)
	}
	dup := r.Hold
	o := burst(a, 30, func(i int) usage.Request {
		r := freeReq(acct, 1)
		r.RatePerMin = 1000
		if i == 15 {
			r.Hold = dup
		}
		return r
	})
	if o.admitted != 29 || len(o.other) != 1 {
		t.Fatalf("admitted %d, failed %v; want 29 and the duplicate", o.admitted, o.other)
	}
	if !errors.Is(o.other[0], usage.ErrQuotaCheck) {
		t.Fatalf("duplicate hold: %v, want ErrQuotaCheck as with Admit", o.other[0])
	}
	if c := usagetest.Of(t, db.Pool, acct); c.Held != 30 || c.Holds != 30 {
		t.Fatalf("counts %+v, want 30 holds (the first admission and 29)", c)
	}
	if db.largest() < 2 {
		t.Fatalf("batches %v: the requests were never grouped", db.sizes)
	}
}

// A request whose caller gives up while it waits for a group is dropped; one whose caller gives
// up while its group runs has its hold released after the group admits it. Neither holds
// anything afterwards.
func TestAdmitterCancellation(t *testing.T) {
	t.Parallel()
	db := &groups{Pool: pgtest.New(t)}
	a := newAdmitter(t, db, 5*time.Millisecond)
	acct := newAccount(t, db.Pool, "free")
	holds := map[string]uuid.UUID{}
	req := func(key string) usage.Request {
		r := freeReq(acct, 1)
		r.RatePerMin = 1000
		r.Hold = holds[key]
		return r
	}
	for _, k := range []string{"first", "inflight", "kept", "queued"} {
		holds[k] = uuid.New()
	}
	// The account's rate window exists, and another transaction holds its row: every admission
	// of the account blocks until it ends.
	if _, err := a.Admit(ctx, req("first")); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM rate_windows WHERE account_id = $1 FOR UPDATE`, acct); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		d   usage.Decision
		err error
	}
	admit := func(c context.Context, key string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			d, err := a.Admit(c, req(key))
			ch <- answer{d, err}
		}()
		return ch
	}
	// Both group slots fill with blocked groups: "inflight" alone, then "kept" after the window.
	inflightCtx, giveUpInflight := context.WithCancel(ctx)
	inflight := admit(inflightCtx, "inflight")
	time.Sleep(50 * time.Millisecond)
	kept := admit(ctx, "kept")
	time.Sleep(50 * time.Millisecond)
	// No slot is free: "queued" waits for a group.
	queuedCtx, giveUpQueued := context.WithCancel(ctx)
	queued := admit(queuedCtx, "queued")
	time.Sleep(20 * time.Millisecond)

	giveUpQueued()
	giveUpInflight()
	for name, ch := range map[string]chan answer{"queued": queued, "inflight": inflight} {
		select {
		case got := <-ch:
			if !errors.Is(got.err, usage.ErrQuotaCheck) {
				t.Errorf("%s: %v, want a failed admission", name, got.err)
			}
		case <-time.After(200 * time.Millisecond):
			t.Fatalf("%s: the caller that gave up still waits", name)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-kept; got.err != nil {
		t.Fatalf("kept: %v", got.err)
	}
	a.Close() // the release of "inflight" has run

	if c := usagetest.Of(t, db.Pool, acct); c.Held != 2 || c.Holds != 2 || c.Quota != 0 {
		t.Fatalf("counts %+v, want the holds of first and kept only", c)
	}
}

// A Postgres that does not answer fails the group promptly, with the error Admit gives, and the
// requests queued behind it fail with it rather than each waiting for another deadline.
func TestAdmitterDatastoreDown(t *testing.T) {
	t.Parallel()
	dbURL, proxy := pgtest.Proxied(t, pgtest.URL(t))
	pool := pgtest.Pool(t, dbURL)
	a := newAdmitter(t, pool, 5*time.Millisecond)
	acct := newAccount(t, pool, "free")
	if _, err := a.Admit(ctx, freeReq(acct, 1)); err != nil {
		t.Fatal(err)
	}
	proxy.Hold() // black-holed: connections stay open, nothing answers
	defer proxy.Restore()
	start := time.Now()
	o := burst(a, 20, func(int) usage.Request { return freeReq(acct, 1) })
	took := time.Since(start)
	if o.admitted > 0 || len(o.other) != 20 {
		t.Fatalf("admitted %d, failed %d; want all 20 failed", o.admitted, len(o.other))
	}
	for _, err := range o.other {
		if !errors.Is(err, usage.ErrQuotaCheck) {
			t.Fatalf("%v, want ErrQuotaCheck (503 quota_check_failed)", err)
		}
	}
	if took > 2500*time.Millisecond {
		t.Fatalf("the requests took %v to fail; a partitioned database must yield a prompt 503", took)
	}
}
