package usage_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// A charge is owed for what was delivered: Close gives back the quota units of undelivered
// emails and withdraws the rows of results that were recorded but never reached the client;
// a settled charge keeps everything; a charge closed twice refunds once.
func TestChargeSettlesWhatWasDelivered(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ledger := usage.NewLedger(pool, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")
	result := func(i int) usage.Row {
		r := usage.ResultRow(usage.Item{Key: fmt.Sprintf("stream:%d", i), AccountID: acct, Route: "verify_stream"},
			verdict.Result{Email: fmt.Sprintf("u%d@example.com", i), Status: verdict.StatusDeliverable}, nil)
		r.OccurredAt = now
		return r
	}

	// A stream of 5: 3 results recorded, 2 of them delivered, then the client went away.
	charge, _, err := ledger.Admit(ctx, freeReq(acct, 5))
	pgtest.Must(t, err, "admit")
	pgtest.Must(t, charge.Record(ctx, []usage.Row{result(0), result(1), result(2)}), "record")
	charge.Deliver("stream:0", "stream:1")
	charge.Close()
	charge.Close()
	if q, b, d := monthly(t, pool, acct); q != 2 || b != 2 || d != 2 {
		t.Errorf("after a partial stream: quota %d, billable %d, daily %d; want 2 of each", q, b, d)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 2 {
		t.Errorf("%d usage rows, want the 2 delivered", n)
	}

	// Served in full: everything stays owed.
	charge, _, err = ledger.Admit(ctx, freeReq(acct, 1))
	pgtest.Must(t, err, "admit")
	pgtest.Must(t, charge.Record(ctx, []usage.Row{result(3)}), "record")
	charge.Settle()
	charge.Close()
	if q, b, _ := monthly(t, pool, acct); q != 3 || b != 3 {
		t.Errorf("after a settled request: quota %d, billable %d; want 3 and 3", q, b)
	}

	// A single verify whose row was written with admission, then the fleet failed.
	req := freeReq(acct, 1)
	req.Rows = []usage.Row{pendingRow(acct, "single:0")}
	charge, _, err = ledger.Admit(ctx, req)
	pgtest.Must(t, err, "admit")
	charge.Close()
	if q, b, _ := monthly(t, pool, acct); q != 3 || b != 3 {
		t.Errorf("after a failed single verify: quota %d, billable %d; want 3 and 3", q, b)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key = 'single:0'`); n != 0 {
		t.Errorf("the failed verify's row is still there")
	}
}

// Billable is the one metering rule: every outcome but a syntax failure.
func TestBillableUnlessSyntaxFailed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		check *verdict.Check
		want  bool
	}{{nil, true}, {ptr(verdict.CheckSyntax), false}, {ptr(verdict.CheckDisposable), true}, {ptr(verdict.CheckNoMX), true}, {ptr(verdict.CheckSMTP), true}} {
		if got := usage.Billable(verdict.Result{FailedCheck: c.check}); got != c.want {
			t.Errorf("failed check %v: billable %v, want %v", c.check, got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
