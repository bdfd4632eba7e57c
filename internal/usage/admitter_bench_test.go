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

// BenchmarkAdmission is admission alone, without HTTP: 50 concurrent callers admit single
// locally decided emails (each with its usage row, as POST /v1/email/verify does) for one paid
// account, through Admit (window=0) and through an Admitter. It shows what Postgres allows the
// admission step by itself on this machine (BENCHMARKS.md, "Grouped admissions (issue 16)").
func BenchmarkAdmission(b *testing.B) {
	for _, window := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("window=%s", window), func(b *testing.B) {
			pool := pgtest.New(b)
			acct := newBenchAccount(b, pool)
			a := usage.NewAdmitter(pool, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)), window)
			defer a.Close()
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
							Now: time.Now(), Rows: []usage.Row{{ItemKey: fmt.Sprintf("bench:%d", i), AccountID: acct, Route: "verify",
								Status: "invalid", FailedCheck: "disposable", Billable: true, QuotaUnit: true, Snapshot: []byte(`{"status":"invalid"}`)}}}
						if _, err := a.Admit(ctx, r); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
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
