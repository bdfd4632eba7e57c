package verifyworker

import "github.com/prometheus/client_golang/prometheus"

// CountChunkFailures gives r mailvet_list_chunk_failures_total, registered with reg, as Services
// does, for the list runner's tests outside the package.
func CountChunkFailures(r *ListRunner, reg prometheus.Registerer) { r.failures = chunkAttempts(reg) }
