package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// A replica killed while the worker fleet verifies a single email (its ledger abandoned: nothing
// more is written, as after SIGKILL) leaves that email's hold, and no usage row. Once the hold's
// lifetime has passed, a sweep on any replica ends it and the room is back; the batch the replica
// had delivered before it died stays billed (docs/reliability.md, "Metering guarantees").
func TestKilledReplicaDoesNotBillUndelivered(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	mgmt := b.provisioningKey(acct)

	// Delivered: a disposable address (billable) and a syntax failure (not billable), 2 units.
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"x@mailinator.com", "junk"}}).want(t, 200, "")
	usagetest.Settle(t, b.pool)

	// In flight when the replica dies: the slow domain answers after 700 ms.
	answered := make(chan reply, 1)
	go func() { answered <- b.verify(key, map[string]any{"email": "sue@slow.test"}) }()
	wait.For(t, 10*time.Second, "the single verify's admission", func() bool { return usagetest.Of(t, b.pool, acct).Holds == 1 })
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
	// The free summary counts the held unit (it is spoken for), the billable days do not.
	if used, billed := summary(), billableDays(); used != 3 || billed != 1 {
		t.Fatalf("before the sweep: calls_used %v, billable %v; want 3 and 1", used, billed)
	}
	if rows := usagetest.Rows(t, b.pool, acct); usagetest.Count(rows, usagetest.Delivered) != 2 {
		t.Fatalf("usage rows %+v, want the delivered batch's two only", rows)
	}
	// The hold's lifetime passes (it is aged rather than the test waiting 70 s) and a sweep runs.
	if n := usagetest.Expire(t, b.pool, acct); n != 1 {
		t.Errorf("swept %d holds, want the single verify's", n)
	}
	if used, billed := summary(), billableDays(); used != 2 || billed != 1 {
		t.Errorf("after the sweep: calls_used %v, billable %v; want 2 and 1 (the delivered batch)", used, billed)
	}
}
