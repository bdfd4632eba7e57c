package verifyworker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
)

// What became of a job's or a list chunk's attempt that failed, as the outcome label of
// mailvet_job_attempt_failures_total and mailvet_list_chunk_failures_total (docs/operations.md,
// "Health, readiness and metrics").
const (
	// attemptOutage: tried again after OutageRetry, not counted toward MaxFailures — a dependency
	// was unavailable, or the failure could not be recorded.
	attemptOutage = "outage"
	// attemptRetry: counted toward MaxFailures, and tried again.
	attemptRetry = "retry"
	// attemptFailed: the MaxFailures-th failure; the job, or the chunk's list, is failed.
	attemptFailed = "failed"
)

// attempts counts failed attempts by outcome. A nil *attempts counts nothing (tests that build a
// runner without metrics).
type attempts struct{ vec *prometheus.CounterVec }

// countAttempts registers vec with reg (may be nil) and gives every outcome its series from the
// start, at 0, so that an alert on its increase sees the first one.
func countAttempts(reg prometheus.Registerer, vec *prometheus.CounterVec) *attempts {
	if reg != nil {
		vec = health.Register(reg, vec)
	}
	for _, o := range []string{attemptOutage, attemptRetry, attemptFailed} {
		vec.WithLabelValues(o)
	}
	return &attempts{vec: vec}
}

// jobAttempts is mailvet_job_attempt_failures_total.
func jobAttempts(reg prometheus.Registerer) *attempts {
	return countAttempts(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_job_attempt_failures_total",
		Help: "Attempts of asynchronous jobs that failed, by what followed: outage (tried again, uncounted), retry (counted, tried again), failed (the job failed).",
	}, []string{"outcome"}))
}

// chunkAttempts is mailvet_list_chunk_failures_total.
func chunkAttempts(reg prometheus.Registerer) *attempts {
	return countAttempts(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_list_chunk_failures_total",
		Help: "Attempts of bulk-list chunks that failed, by what followed: outage (tried again, uncounted), retry (counted, tried again), failed (the list failed).",
	}, []string{"outcome"}))
}

func (a *attempts) add(outcome string) {
	if a != nil {
		a.vec.WithLabelValues(outcome).Inc()
	}
}

// Why a worker drops a batch or stream item without probing it (items.go), as the reason label of
// mailvet_verify_items_dropped_total.
const (
	// dropStale: the copy may have sat past AckWait in the pull buffer; another copy answers.
	dropStale = "stale"
	// dropHeld: this worker already holds a copy of the item, which answers it.
	dropHeld = "held"
	// dropGone: the item was no longer in the stream when its slot came (a twin answered it, or
	// its caller was answered without it).
	dropGone = "gone"
)

func newDropped() *prometheus.CounterVec {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_verify_items_dropped_total",
		Help: "Batch and stream items dropped unprobed, by reason: stale (may have outlived AckWait in the pull buffer), held (a copy this worker holds), gone (no longer in the stream).",
	}, []string{"reason"})
	for _, r := range []string{dropStale, dropHeld, dropGone} {
		vec.WithLabelValues(r)
	}
	return vec
}
