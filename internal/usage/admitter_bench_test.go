package usage_test

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
)

// BenchmarkAdmission is metering alone, without HTTP: 50 concurrent callers each admit a single
// locally decided email for one paid account, hand over its usage row and release its hold, as
// POST /v1/email/verify does, through a Ledger that admits each alone (window=0) or in groups.
// The time includes writing every row (Ledger.Flush), behind the admissions. It shows what
// Postgres allows metering by itself on this machine (BENCHMARKS.md, "Metering as holds
// (issue 29)").
func BenchmarkAdmission(b *testing.B) {
	for _, window := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("window=%s", window), func(b *testing.B) {
			pool := pgtest.New(b)
			acct := newBenchAccount(b, pool)
			l := usage.NewGroupedLedger(pool, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)), window)
			defer l.Close()
			const callers = 50
			var (
				next   atomic.Int64
				failed atomic.Int64
				wg     sync.WaitGroup
			)
			b.ResetTimer()
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						r := usage.Request{AccountID: acct, Units: 1, RatePerMin: 1 << 30, MonthlyCalls: 1 << 30, OverageEUR: 0.002,
							Now: time.Now(), Lifetime: time.Minute}
						h, _, err := l.Admit(ctx, r)
						if err != nil {
							failed.Add(1)
							continue
						}
						h.Deliver(usage.Row{ItemKey: fmt.Sprintf("bench:%d", i), AccountID: acct, Route: "verify",
							Status: "invalid", FailedCheck: "disposable", Billable: true, QuotaUnit: true, Snapshot: []byte(`{"status":"invalid"}`)})
						h.Close()
					}
				}()
			}
			wg.Wait()
			l.Flush()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "admissions/s")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d admissions failed", n)
			}
		})
	}
}

func newBenchAccount(b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	id := uuid.NewString()
	pgtest.Exec(b, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'scale')`, id)
	return id
}
