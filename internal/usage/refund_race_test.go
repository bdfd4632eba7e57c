package usage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// The charge's refund of a doubtful write's units (returnDoubtfulUnits) and a sweep of the same
// rows (withdraw with returnUnitsOnce) running at the same moment give each unit back once.
func TestDoubtfulRefundRacingTheSweepGivesEachUnitOnce(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t)
	const n = 20
	deadlocks, other := 0, 0
	for trial := range 15 {
		acct := uuid.NewString()
		pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'free')`, acct)
		at := time.Now()
		d, err := Admit(ctx, pool, Request{AccountID: acct, Free: true, Units: n, RatePerMin: 1000, MonthlyCalls: 500, Now: at})
		pgtest.Must(t, err, "admit")
		replica := uuid.NewString()
		pgtest.Exec(t, pool, `INSERT INTO api_replicas (id, alive_until) VALUES ($1, now() - interval '1 hour')`, replica)
		prefix := uuid.NewString()
		var rows []Row
		var keys []string
		for i := range n {
			k := fmt.Sprintf("%s:%d", prefix, i)
			keys = append(keys, k)
			rows = append(rows, Row{ItemKey: k, AccountID: acct, OccurredAt: at, Route: "verify_batch", Status: "deliverable",
				Billable: true, QuotaUnit: true, heldBy: replica})
		}
		pgtest.Must(t, Record(ctx, pool, rows), "record")
		var wg sync.WaitGroup
		var errA, errB error
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; errA = returnDoubtfulUnits(ctx, pool, acct, d.Month, keys) }()
		go func() { defer wg.Done(); <-start; _, errB = SweepHeld(ctx, pool, time.Second) }()
		close(start)
		wg.Wait()
		for _, e := range []error{errA, errB} {
			if e != nil {
				if strings.Contains(e.Error(), "deadlock") {
					deadlocks++
				} else {
					other++
					t.Logf("trial %d: %v", trial, e)
				}
			}
		}
		var q int
		if err := pool.QueryRow(ctx, `SELECT quota_units FROM usage_monthly WHERE account_id = $1`, acct).Scan(&q); err != nil {
			t.Fatal(err)
		}
		if errA == nil && errB == nil && q != 0 {
			t.Errorf("trial %d: quota_units %d after both, want 0 (each of the %d units back once)", trial, q, n)
		}
		if q < 0 || q > n {
			t.Errorf("trial %d: quota_units %d", trial, q)
		}
	}
	if deadlocks > 0 || other > 0 {
		t.Errorf("%d deadlocks and %d other errors in 15 trials: the two statements must wait for each other, not fail", deadlocks, other)
	}
}
