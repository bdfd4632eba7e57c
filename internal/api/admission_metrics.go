package api

import "github.com/prometheus/client_golang/prometheus"

// admissionRefusal are the error codes with which the verify routes refuse an authenticated
// request before verifying anything: its account's limits (rate, monthly quota, spend cap), a
// quota that could not be read, or a fleet that cannot take the work (NATS or Postgres down, no
// worker, every worker busy). Malformed requests are not refusals: they are the caller's to fix.
// The code is the label: a fixed set, never an account, a key or an address.
var admissionRefusal = map[string]bool{
	CodeRateLimitExceeded:    true,
	CodeMonthlyQuotaExceeded: true,
	CodePaymentRequired:      true,
	CodeQuotaCheckFailed:     true,
	CodeServiceUnavailable:   true,
}

// newAdmissionRefusals is mailvet_admission_refusals_total (docs/operations.md, "Health, readiness
// and metrics"). It is counted in logRejections, the verify group's middleware, which sees every
// refusal of those routes after authentication.
func newAdmissionRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_admission_refusals_total",
		Help: "Authenticated verify-route requests refused before verification, by error code.",
	}, []string{"code"})
}
