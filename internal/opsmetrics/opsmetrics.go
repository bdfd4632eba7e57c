// Package opsmetrics holds the verification pipeline's Prometheus series (docs/operations.md,
// "Health, readiness and metrics"): what it decides, how long its layers take, and the SMTP
// replies the prober reads. The pipeline and the prober only call interfaces of their own
// (verify.Observer, smtp.Observer); this package implements them, so that they need no metrics
// library.
//
// Every label has a fixed, small set of values: statuses, reasons, layers, SMTP verbs, reply
// classes. Never an address, a domain or a host.
package opsmetrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
)

// Verify implements verify.Observer (and so smtp.Observer) with Prometheus series.
type Verify struct {
	results *prometheus.CounterVec   // status, reason
	layers  *prometheus.HistogramVec // layer
	replies *prometheus.CounterVec   // command, class
	// byLayer holds the histogram of each layer verify names, resolved once: Layer runs for every
	// address, several times, and a map read is cheaper than hashing the label value each time.
	// It is never written after NewVerify, so concurrent reads are safe.
	byLayer map[string]prometheus.Observer
}

var _ verify.Observer = (*Verify)(nil)

// NewVerify returns the pipeline's series, registered with reg (may be nil). Two verifiers in one
// process (`api -dev`: the API's and the in-process worker's) share them.
func NewVerify(reg prometheus.Registerer) *Verify {
	m := &Verify{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailvet_verify_results_total",
			Help: "Finished verification results, by status and reason.",
		}, []string{"status", "reason"}),
		layers: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mailvet_verify_layer_duration_seconds",
			Help: "Time of one run of a verification layer (syntax, disposable, mx, smtp).",
			// From the local layers' microseconds to the SMTP probe's 1.5 s budget and beyond.
			Buckets: []float64{.000001, .00001, .0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 1.5, 2.5, 5, 10},
		}, []string{"layer"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailvet_smtp_replies_total",
			Help: "SMTP replies read by the prober, by the command they answer and their class (2xx, 3xx, 4xx, 5xx).",
		}, []string{"command", "class"}),
	}
	if reg != nil {
		m.results = health.Register(reg, m.results)
		m.layers = health.Register(reg, m.layers)
		m.replies = health.Register(reg, m.replies)
	}
	m.byLayer = map[string]prometheus.Observer{}
	for _, l := range []string{verify.ObservedSyntax, verify.ObservedDisposable, verify.ObservedMX, verify.ObservedSMTP} {
		m.byLayer[l] = m.layers.WithLabelValues(l)
	}
	return m
}

// Result counts one finished result.
func (m *Verify) Result(status verdict.Status, reason verdict.Reason) {
	m.results.WithLabelValues(string(status), string(reason)).Inc()
}

// Layer records one run of a layer.
func (m *Verify) Layer(layer string, d time.Duration) {
	if o, ok := m.byLayer[layer]; ok {
		o.Observe(d.Seconds())
		return
	}
	m.layers.WithLabelValues(layer).Observe(d.Seconds())
}

// Reply counts one SMTP reply by its class: the code's first digit.
func (m *Verify) Reply(command string, code int) {
	m.replies.WithLabelValues(command, replyClass(code)).Inc()
}

// replyClass is "2xx" … "5xx"; the prober never passes a code outside 200–599.
func replyClass(code int) string {
	if code < 200 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}
