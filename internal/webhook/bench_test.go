package webhook

import (
	"context"
	"github.com/mailvet/mailvet/internal/queue"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkDeliveryThroughput measures one worker (default concurrency 64) delivering to a local
// HTTPS receiver that answers 200. Each iteration inserts benchDeliveries deliveries the way the
// verifier does (untimed), then publishes them and waits until Postgres shows all delivered
// (timed). Everything is on loopback; an iteration gives up after two minutes.
//
//	go test -run '^$' -bench DeliveryThroughput -benchtime 3x -count 5 ./internal/webhook/
func BenchmarkDeliveryThroughput(b *testing.B) {
	const benchDeliveries = 2000
	bd := setup(b)
	rc := newReceiver(b, statuses(200))
	bd.startWorker(b, Options{Client: ClientOptions{AllowPrivate: true}})
	ctx := context.Background()
	url := rc.url("/cb")

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ids := make([]uuid.UUID, benchDeliveries)
		tx, err := bd.pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for j := range ids {
			if ids[j], err = CreateDelivery(ctx, tx, bd.jobID, bd.accountID, url, "whsec_12345678", sampleBody); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		// Publish from a few goroutines, as several verifier replicas would.
		var wg sync.WaitGroup
		const publishers = 8
		for p := range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := p; j < len(ids); j += publishers {
					if err := Publish(ctx, bd.js, queue.Layout{}, ids[j]); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		want := (i + 1) * benchDeliveries
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var n int
			if err := bd.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE state = 'delivered'`).Scan(&n); err != nil {
				b.Fatal(err)
			}
			if n == want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d delivered after 2 minutes", n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchDeliveries)/b.Elapsed().Seconds(), "deliveries/s")
	if got := int(rc.count.Load()); got != b.N*benchDeliveries {
		b.Errorf("receiver got %d requests, want %d", got, b.N*benchDeliveries)
	}
}
