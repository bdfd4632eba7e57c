package usage_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

func rejected(acct string, i int) usage.Row {
	return usage.Row{ItemKey: fmt.Sprintf("rej:%d", i), AccountID: acct, OccurredAt: now, Route: "verify",
		FailedCheck: "rate_limit_exceeded", ErrorClass: "rate_limit"}
}

func TestRejectionsAreWrittenAndNeverCounted(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	acct := newAccount(t, pool, "free")
	w := usage.NewRejections(pool, slog.New(slog.DiscardHandler))
	defer w.Close()
	for i := range 600 { // more than one batch
		w.Add(rejected(acct, i))
	}
	w.Add(rejected(acct, 0)) // the same item key is logged once
	w.Flush()
	if n := usagetest.Count(usagetest.Rows(t, pool, acct), func(r usagetest.Row) bool { return r.ErrorClass == "rate_limit" }); n != 600 {
		t.Errorf("%d rejection rows, want 600", n)
	}
	if c := usagetest.Of(t, pool, acct); c != (usagetest.Counts{}) {
		t.Errorf("rejections counted: %+v", c)
	}
	if w.Dropped() != 0 {
		t.Errorf("%d dropped on a healthy database", w.Dropped())
	}
}

// With Postgres partitioned away, Add never blocks, memory stays bounded (rows beyond the queue
// are dropped), drops are logged and counted, and Close does not wait for the partition.
func TestRejectionsDuringAPartition(t *testing.T) {
	t.Parallel()
	dbURL, proxy := pgtest.Proxied(t, pgtest.URL(t))
	pool := pgtest.Pool(t, dbURL)
	acct := newAccount(t, pool, "free")
	logs := &logtest.Buffer{}
	w := usage.NewRejections(pool, slog.New(slog.NewJSONHandler(logs, nil)))

	proxy.Hold()
	defer proxy.Restore() // before the pool closes
	const n = 3000
	start := time.Now()
	for i := range n {
		w.Add(rejected(acct, i))
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("%d Adds took %v during a partition", n, took)
	}
	if w.Dropped() == 0 {
		t.Error("nothing dropped although the queue is bounded")
	}

	start = time.Now()
	w.Close()
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Close took %v during a partition", took)
	}
	if got := w.Dropped(); got != n {
		t.Errorf("dropped %d, want all %d (none could be written)", got, n)
	}
	for _, want := range []string{"queue full", "usage rows of rejected requests dropped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	w.Add(rejected(acct, n)) // after Close: dropped, not blocked
	if w.Dropped() != n+1 {
		t.Errorf("an Add after Close: dropped %d, want %d", w.Dropped(), n+1)
	}
}
