// Package queuelag records how long work waits in JetStream before a worker takes it: the
// mailvet_queue_lag_seconds histogram of docs/operations.md ("Metrics"), by consumer. Its label
// has a fixed set of values, the consumer names below.
package queuelag

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
)

// The consumers Recorder is told about, as they appear in its consumer label.
const (
	ConsumerVerifyItems = "verify_items" // batch and stream items (VERIFY)
	ConsumerJobs        = "jobs"         // asynchronous jobs (JOBS)
	ConsumerListChunks  = "list_chunks"  // bulk-list chunks (LISTS)
	ConsumerWebhooks    = "webhooks"     // webhook deliveries (WEBHOOKS)
)

// Recorder records how long messages waited in JetStream before a worker took them.
type Recorder struct {
	lag *prometheus.HistogramVec
}

// New returns the queue-lag series, registered with reg (may be nil); workers in one
// process share it.
func New(reg prometheus.Registerer) *Recorder {
	q := &Recorder{lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mailvet_queue_lag_seconds",
		Help:    "Time from a message's arrival in its JetStream stream to a worker taking it, by consumer; a redelivery counts from the first arrival.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
	}, []string{"consumer"})}
	if reg != nil {
		q.lag = health.Register(reg, q.lag)
	}
	return q
}

// Took records the lag of m, taken now by consumer. A nil Recorder records nothing (tests that
// build a worker without metrics).
func (q *Recorder) Took(consumer string, m jetstream.Msg) {
	if q == nil {
		return
	}
	md, err := m.Metadata()
	if err != nil {
		return // not a JetStream message: nothing to measure
	}
	q.lag.WithLabelValues(consumer).Observe(max(0, time.Since(md.Timestamp).Seconds()))
}
