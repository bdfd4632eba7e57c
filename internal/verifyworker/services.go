package verifyworker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/privacy"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
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
	// Layout is the deployment's NATS layout (app.Infra.Layout): every stream, consumer and
	// subject the workers use, and the replication of streams they re-create after a NATS restart.
	Layout queue.Layout
	// GreylistWindow bounds the job runner's re-probes of greylisted jobs, as configured
	// (config.GreylistWindow; 0 turns them off). GreylistDelay, when set, replaces the runner's
	// default wait before a re-probe (tests shorten it).
	GreylistWindow, GreylistDelay time.Duration
	// Lists configures the bulk-list runner (list.Defaults with the configured retention);
	// PublicURL is the base of the results URL its completion callbacks carry.
	Lists     list.Config
	PublicURL string
	// ListRunner, when set, adjusts the list runner (tests shorten its timings).
	ListRunner func(*ListRunner)
	// Retention is how long result snapshots and finished jobs keep personal data
	// (privacy.Defaults unless configured); every worker runs the retention loop, which replicas
	// share (docs/personal-data.md, "Retention").
	Retention privacy.Retention
}

// WithConfig fills in the parts of d that come from the configuration; the verifier binary and
// `api -dev` build their workers the same way.
func (d Deps) WithConfig(cfg config.Config) Deps {
	d.GreylistWindow = cfg.GreylistWindow
	d.Lists, d.PublicURL = list.Configured(cfg.Lists.Retention), cfg.PublicURL
	d.Retention = privacy.Retention{Results: cfg.ResultRetention, Jobs: cfg.JobRetention}
	return d
}

// Services returns the long-running parts of a verifier worker — the sync/batch worker, the
// async job runner, the bulk-list runner and the personal-data retention loop — for app.Infra.Run, and registers their readiness checks: a worker whose
// consumers are not running is not ready. The verifier binary and `api -dev` run the same parts.
func Services(d Deps) []func(context.Context) error {
	w := New(d.NATS, d.JS, d.Pipe, d.Log, d.Metrics, Options{Layout: d.Layout})
	jobs := NewJobRunner(d.Pool, d.JS, d.Pipe, d.Log)
	jobs.Layout = d.Layout
	jobs.GreylistWindow = d.GreylistWindow
	if d.GreylistDelay > 0 {
		jobs.GreylistDelay = d.GreylistDelay
	}
	if d.Lists.ChunkSize == 0 {
		// Deps without WithConfig (tests, tools): the production settings, not a zero Config, whose
		// lists would expire the moment they finish and whose account slots would hold none.
		d.Lists = list.Defaults()
	}
	lists := NewListRunner(list.NewStore(d.Pool, d.Lists), d.JS, d.Pipe, d.Log)
	lists.Layout, lists.PublicURL = d.Layout, d.PublicURL
	if d.ListRunner != nil {
		d.ListRunner(lists)
	}
	registerSessions(d.Metrics, d.Pipe)
	if d.Metrics != nil {
		jobs.Lag = queuelag.New(d.Metrics)
		lists.Lag = jobs.Lag
		jobs.failures, lists.failures = jobAttempts(d.Metrics), chunkAttempts(d.Metrics)
	}
	if d.Ready != nil {
		d.Ready.Add("consumer verify items", w.Ready)
		d.Ready.Add("consumer jobs", jobs.Ready)
		d.Ready.Add("consumer list chunks", lists.Ready)
	}
	ret := d.Retention
	if ret.Results <= 0 || ret.Jobs <= 0 {
		ret = privacy.Defaults()
	}
	parts := []func(context.Context) error{w.Run, jobs.Run, lists.Run}
	if d.Pool != nil { // tests of the sync worker alone run without Postgres
		parts = append(parts, (&privacy.Retainer{DB: d.Pool, Retention: ret, Log: d.Log}).Run)
	}
	return parts
}
