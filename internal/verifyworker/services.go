package verifyworker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
)

// Deps are what a verifier worker's parts need.
type Deps struct {
	Pool *pgxpool.Pool
	NATS *nats.Conn
	JS   jetstream.JetStream
	Pipe Pipeline
	Log  *slog.Logger
	// Metrics and Ready may be nil (tests); Ready gets a check per consumer.
	Metrics prometheus.Registerer
	Ready   *health.Checker
	// StreamReplicas is the replication of streams the workers re-create after a NATS restart.
	StreamReplicas int
	// GreylistWindow bounds the job runner's re-probes of greylisted jobs, as configured
	// (config.GreylistWindow; 0 turns them off). GreylistDelay, when set, replaces the runner's
	// default wait before a re-probe (tests shorten it).
	GreylistWindow, GreylistDelay time.Duration
}

// Services returns the long-running parts of a verifier worker — the sync/batch worker and the
// async job runner — for app.Infra.Run, and registers their readiness checks: a worker whose
// consumers are not running is not ready. The verifier binary and `api -dev` run the same parts.
func Services(d Deps) []func(context.Context) error {
	w := New(d.NATS, d.JS, d.Pipe, d.Log, d.Metrics, Options{StreamReplicas: d.StreamReplicas})
	jobs := NewJobRunner(d.Pool, d.JS, d.Pipe, d.Log)
	jobs.StreamReplicas = d.StreamReplicas
	jobs.GreylistWindow = d.GreylistWindow
	if d.GreylistDelay > 0 {
		jobs.GreylistDelay = d.GreylistDelay
	}
	if d.Ready != nil {
		d.Ready.Add("consumer verify items", w.Ready)
		d.Ready.Add("consumer jobs", jobs.Ready)
	}
	return []func(context.Context) error{w.Run, jobs.Run}
}
