package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
)

// A replica killed while the worker fleet verifies a single email (its ledger abandoned: no
// refund, no confirmation, no heartbeat, as after SIGKILL) leaves that email's usage row held.
// Once its heartbeat has lapsed, a sweep on any replica withdraws the row, and the management
// usage routes no longer count it; the batch the replica had delivered before it died stays
// billed (docs/reliability.md, "Usage of a replica that died").
func TestKilledReplicaDoesNotBillUndelivered(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	mgmt := b.provisioningKey(acct)
	ctx := context.Background()

	// Delivered: a disposable address (billable) and a syntax failure (not billable), 2 units.
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"x@mailinator.com", "junk"}}).want(t, 200, "")
	waitUntil(t, "the batch's confirmation and the replica's heartbeat", func() bool {
		return b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND held_by IS NULL`, acct) == 2 &&
			b.count(`SELECT count(*) FROM api_replicas`) == 1
	})

	// In flight when the replica dies: the slow domain answers after 700 ms.
	answered := make(chan reply, 1)
	go func() { answered <- b.verify(key, map[string]any{"email": "sue@slow.test"}) }()
	waitUntil(t, "the single verify's admission", func() bool {
		return b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND held_by IS NOT NULL`, acct) == 1
	})
	b.srv.ledger.Abandon() // kill -9
	<-answered             // the handler runs on in this test; a killed process would not answer

	summary := func() float64 {
		return b.call(http.MethodGet, "/v1/management/usage/summary", mgmt, nil).want(t, 200, "").body["calls_used"].(float64)
	}
	billableDays := func() float64 {
		total := 0.0
		for _, d := range b.call(http.MethodGet, "/v1/management/usage", mgmt, nil).want(t, 200, "").body["days"].([]any) {
			total += d.(map[string]any)["calls"].(float64)
		}
		return total
	}
	if used, billed := summary(), billableDays(); used != 3 || billed != 2 {
		t.Fatalf("before the sweep: calls_used %v, billable %v; want 3 and 2", used, billed)
	}

	// A sweep within the grace leaves the replica's row alone: it might only be slow.
	if n, err := usage.SweepHeld(ctx, b.pool, usage.DefaultHoldGrace); err != nil || n != 0 {
		t.Fatalf("early sweep withdrew %d rows (%v), want none", n, err)
	}
	// The grace passes (the heartbeat row is aged rather than the test waiting 30 s).
	pgtest.Exec(t, b.pool, `UPDATE api_replicas SET alive_until = now() - interval '1 second'`)
	n, err := usage.SweepHeld(ctx, b.pool, usage.DefaultHoldGrace)
	pgtest.Must(t, err, "sweep")
	if n != 1 {
		t.Errorf("swept %d rows, want the single verify's", n)
	}
	if used, billed := summary(), billableDays(); used != 2 || billed != 1 {
		t.Errorf("after the sweep: calls_used %v, billable %v; want 2 and 1 (the delivered batch)", used, billed)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
