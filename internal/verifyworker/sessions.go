package verifyworker

import (
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// sessionCounter is a pipeline that can tell its SMTP sessions open per MX address (the engine,
// verify.Verifier).
type sessionCounter interface {
	OpenSessions(fn func(ip netip.Addr, n int))
}

// sessionsCollector exports mailvet_smtp_sessions, filled from the prober's pools when scraped:
// the probe path pays nothing for it. The label is bounded by the sessions open at that moment,
// not by every address ever probed: an address whose sessions have all closed has no series.
// Summed by mx over the fleet it is what MAILVET_SMTP_MAX_PER_HOST caps (docs/fleet.md).
type sessionsCollector struct {
	src sessionCounter

	mu    sync.Mutex // one scrape at a time fills the gauge
	gauge *prometheus.GaugeVec
}

func newSessionsCollector(src sessionCounter) *sessionsCollector {
	return &sessionsCollector{src: src, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mailvet_smtp_sessions",
		Help: "SMTP sessions this worker has open (busy or idle), by MX address; only addresses with a session open have a series.",
	}, []string{"mx"})}
}

func (c *sessionsCollector) Describe(ch chan<- *prometheus.Desc) { c.gauge.Describe(ch) }

func (c *sessionsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gauge.Reset()
	c.src.OpenSessions(func(ip netip.Addr, n int) {
		c.gauge.WithLabelValues(ip.String()).Set(float64(n))
	})
	c.gauge.Collect(ch)
}

// registerSessions registers mailvet_smtp_sessions for pipe, when it counts its sessions.
func registerSessions(reg prometheus.Registerer, pipe Pipeline) {
	if sc, ok := pipe.(sessionCounter); ok && reg != nil {
		reg.MustRegister(newSessionsCollector(sc))
	}
}
