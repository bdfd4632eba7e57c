package verify

import (
	"time"

	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// Observer is told what the pipeline does, for the operator's metrics (internal/opsmetrics;
// docs/operations.md, "Health, readiness and metrics"). The pipeline defines only what it calls, so
// it needs no metrics library. Every method is called from the verifying goroutines and must be
// cheap and safe for concurrent use. No argument ever carries an address or a domain.
type Observer interface {
	// Reply is the SMTP prober's hook (smtp.Observer): one call per SMTP reply read.
	smtp.Observer
	// Layer is called once per run of a layer: "syntax", "disposable" and "smtp" per address,
	// "mx" per look-up (a batch shares one look-up among the addresses of a domain). For "smtp"
	// the time runs from the request of the probe to its answer, waits for a session included.
	Layer(layer string, d time.Duration)
	// Result is called once per finished result, with its status and reason. A result Local
	// leaves pending for the network layers is not finished and is not reported.
	Result(status verdict.Status, reason verdict.Reason)
}

// The layer names Observer.Layer is called with.
const (
	ObservedSyntax     = "syntax"
	ObservedDisposable = "disposable"
	ObservedMX         = "mx"
	ObservedSMTP       = "smtp"
)

// NewObserved is New with an observer (nil for none) that is told every layer's time, every SMTP
// reply and every finished result.
func NewObserved(cfg Config, obs Observer) (*Verifier, error) {
	v, err := newWithObserver(cfg, obs)
	if err != nil {
		return nil, err
	}
	if obs != nil {
		v.obs = obs
	}
	return v, nil
}

// layerDone reports a layer's time since start, when an observer is set.
func (v *Verifier) layerDone(layer string, start time.Time) {
	if v.obs != nil {
		v.obs.Layer(layer, time.Since(start))
	}
}

// clock is time.Now when an observer wants times, and the zero time otherwise: the local layers
// take well under a microsecond, and reading the clock would be a good part of their cost.
func (v *Verifier) clock() time.Time {
	if v.obs == nil {
		return time.Time{}
	}
	return time.Now()
}
