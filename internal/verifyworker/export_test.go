package verifyworker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// CountChunkFailures gives r mailvet_list_chunk_failures_total, registered with reg, as Services
// does, for the list runner's tests outside the package.
func CountChunkFailures(r *ListRunner, reg prometheus.Registerer) { r.failures = chunkAttempts(reg) }

// ConsumerSettled waits, for at most within, until consumer of stream has nothing pending or
// unacknowledged: the runners have answered every message, for good or for a later try.
func ConsumerSettled(t *testing.T, js jetstream.JetStream, stream, consumer string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		cons, err := js.Consumer(ctx, stream, consumer)
		pgtest.Must(t, err, "consumer")
		info, err := cons.Info(ctx)
		pgtest.Must(t, err, "consumer info")
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not settled: %d pending ack, %d pending", consumer, info.NumAckPending, info.NumPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
