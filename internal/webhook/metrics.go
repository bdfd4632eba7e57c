package webhook

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/queuelag"
)

// metrics are the worker's Prometheus series.
type metrics struct {
	attempts   *prometheus.CounterVec   // by outcome
	attemptDur prometheus.Histogram     // one HTTP attempt
	latency    *prometheus.HistogramVec // delivery created → final state, by state
	lag        *queuelag.Recorder       // message arrival → taken; nil when not registered
}

// Attempt outcomes as they appear in the outcome label.
const (
	labelSuccess   = "success"         // 2xx
	labelServerErr = "http_5xx"        // retried while attempts remain
	labelClientErr = "http_other"      // 3xx, 4xx and anything else: final
	labelTransport = "transport_error" // connection, TLS, timeout: retried while attempts remain
	labelRefused   = "refused"         // forbidden address or URL: final, never dialled
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailvet_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome.",
		}, []string{"outcome"}),
		attemptDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailvet_webhook_attempt_duration_seconds",
			Help:    "Duration of one webhook HTTP attempt.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mailvet_webhook_delivery_latency_seconds",
			Help:    "Time from a delivery's creation to its final state, by final state.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"state"}),
	}
	if reg != nil {
		m.attempts = register(reg, m.attempts)
		m.attemptDur = register(reg, m.attemptDur)
		m.latency = register(reg, m.latency)
		m.lag = queuelag.New(reg)
	}
	return m
}

// register registers c, or returns the collector already registered under its name, so two
// workers in one process (make run, tests) share the series instead of failing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
