// Package app wires the dependencies every Mailvet process shares — logger, Postgres pool, NATS
// connection (or an embedded server in dev mode), JetStream streams, readiness checks, metrics and
// the ops listener — so that the three mains stay thin and start the same way.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/queue"
)

// ShutdownGrace bounds how long the API's requests in flight may take to finish after a stop
// signal. It covers a single verification, which waits up to its 10-second deadline for a
// verifier and then writes its answer: a shorter grace cuts the connection of an answer on its
// way during every rolling restart. Batches and streams end sooner, 1 s after the signal, and a
// stream's client that stops reading is given up on 10 s later, inside this bound. The workers'
// drains have bounds of their own (a job, a bulk-list chunk; docs/operations.md, "Start-up and
// shutdown").
const ShutdownGrace = 15 * time.Second

// NewLogger returns a JSON logger, the format of every binary's logs in production.
func NewLogger(w io.Writer, name string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("service", name)
}

// Logger returns the logger a binary configured by cfg writes to w: JSON lines, or text lines
// (time of day, level, message, then key=value pairs) when MAILVET_LOG_FORMAT says text or, unset,
// in dev mode when w is a terminal, where a person reads them (docs/operations.md, "Logs").
func Logger(w io.Writer, name string, cfg config.Config) *slog.Logger {
	format := cfg.LogFormat
	if format == "" {
		format = config.LogJSON
		if cfg.Dev && isTerminal(w) {
			format = config.LogText
		}
	}
	if format == config.LogJSON {
		return NewLogger(w, name)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: shortTime})).With("service", name)
}

// shortTime writes the record's time as the time of day to the millisecond: a person watching a
// dev process's logs knows the date.
func shortTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
	}
	return a
}

// isTerminal reports whether w is a terminal (a character device), not a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Infra holds a process's shared dependencies.
type Infra struct {
	Config config.Config
	Log    *slog.Logger
	Pool   *pgxpool.Pool
	NATS   *nats.Conn
	JS     jetstream.JetStream
	// Layout is this deployment's names on NATS and its streams' replication; every stream,
	// consumer, subject and bucket the process uses goes through it.
	Layout   queue.Layout
	Ready    *health.Checker
	Metrics  *prometheus.Registry
	Embedded *server.Server // non-nil in dev mode without NATS_URL
	// Streams re-creates streams a NATS server lost; Run keeps it going.
	Streams *queue.Keeper

	// The ops listener serves from the start of Start, so that /healthz answers while the
	// process waits for its dependencies; stopOps ends it, once.
	ops      *HTTPServer
	opsStop  context.CancelFunc
	opsDone  chan error
	opsOnce  sync.Once
	opsErr   error
	starting atomic.Pointer[string] // what the start-up waits for; nil once Run has begun
}

// DevDataDir is where dev mode keeps the embedded NATS store; it is git-ignored.
const DevDataDir = ".data"

// Start connects everything a process needs. In dev mode it also creates and migrates the
// database and, with NATS_URL empty, starts an embedded JetStream server.
//
// A Postgres or a NATS cluster that is not ready yet is waited for, with backoff and a log line
// for each wait, until ctx ends: in a deployment the processes often start before their
// dependencies. So is a database not migrated yet. Mistakes that waiting cannot fix (bad
// credentials, a database that does not exist) fail at once and say what to do. The ops listener
// serves from the start: /healthz answers 200 while the process waits, and /readyz 503 with a
// "startup" check that says what it waits for.
func Start(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (_ *Infra, err error) {
	in := &Infra{Config: cfg, Log: log, Layout: Layout(cfg), Ready: health.NewChecker(2 * time.Second), Metrics: health.NewRegistry()}
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	if in.ops, err = Listen(cfg.MetricsAddr, health.Handler(in.Ready, in.Metrics)); err != nil {
		return nil, fmt.Errorf("MAILVET_METRICS_ADDR: %w", err)
	}
	in.serveOps()
	in.Ready.Add("startup", in.startupCheck)
	in.waitingFor("Postgres")

	if cfg.Dev {
		if err := database.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
		if _, err := database.Migrate(ctx, cfg.DatabaseURL, log); err != nil {
			return nil, err
		}
	}
	if in.Pool, err = database.OpenWait(ctx, cfg.DatabaseURL, log); err != nil {
		return nil, err
	}
	in.waitingFor("the database schema (run `bin/api migrate`)")
	if err := database.WaitSchema(ctx, in.Pool, log); err != nil {
		return nil, err
	}
	in.waitingFor("NATS")

	natsURL := cfg.NatsURL
	if natsURL == "" {
		dir := filepath.Join(DevDataDir, "nats")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if in.Embedded, err = queue.StartEmbedded(queue.EmbeddedOptions{StoreDir: dir}); err != nil {
			return nil, err
		}
		natsURL = in.Embedded.ClientURL()
		log.Info("embedded NATS JetStream started", "url", natsURL, "store", dir)
	}
	if in.NATS, err = queue.ConnectWait(ctx, natsURL, "mailvet-"+name, NATSAuth(cfg), log); err != nil {
		return nil, err
	}
	if in.JS, err = jetstream.New(in.NATS); err != nil {
		return nil, err
	}
	in.waitingFor("the JetStream streams")
	if err := queue.EnsureStreams(ctx, in.JS, in.Layout, log); err != nil {
		return nil, err
	}
	link := queue.Watch(in.NATS)
	in.Streams = queue.NewKeeper(in.JS, link, in.Layout, log)

	pool, js := in.Pool, in.JS
	in.Ready.Add("postgres", func(ctx context.Context) error { return pool.Ping(ctx) })
	in.Ready.Add("nats", func(ctx context.Context) error { return queue.Ready(ctx, link, js) })
	in.Ready.Add("streams", in.Streams.Check)
	// Not ready yet: the binary still sets up its own parts (buckets, consumers, the API's
	// listener) before Run, which ends the start-up.
	in.waitingFor("the process's own set-up")
	return in, nil
}

// waitingFor records what Start waits for now, for /readyz's "startup" check.
func (in *Infra) waitingFor(what string) { in.starting.Store(&what) }

// started ends the start-up: /readyz's "startup" check goes away.
func (in *Infra) started() {
	in.starting.Store(nil)
	in.Ready.Remove("startup")
}

// startupCheck fails while the process is still starting, saying what it waits for.
func (in *Infra) startupCheck(context.Context) error {
	if what := in.starting.Load(); what != nil {
		return fmt.Errorf("starting: waiting for %s", *what)
	}
	return nil
}

// serveOps serves the ops listener in the background until stopOps.
func (in *Infra) serveOps() {
	ctx, cancel := context.WithCancel(context.Background())
	in.opsStop, in.opsDone = cancel, make(chan error, 1)
	go func() { in.opsDone <- in.ops.Serve(ctx, time.Second, in.Log) }()
}

// stopOps shuts the ops listener down (in-flight requests get a second) and returns how its
// serving ended; only the first call does anything.
func (in *Infra) stopOps() error {
	in.opsOnce.Do(func() {
		if in.opsStop != nil {
			in.opsStop()
			in.opsErr = <-in.opsDone
		}
	})
	return in.opsErr
}

// Layout is the NATS layout cfg describes (MAILVET_NATS_PREFIX, MAILVET_STREAM_REPLICAS).
func Layout(cfg config.Config) queue.Layout {
	return queue.Layout{Prefix: cfg.NATS.Prefix, Replicas: cfg.StreamReplicas}
}

// NATSAuth is the NATS credentials and TLS settings of cfg (MAILVET_NATS_CREDS, MAILVET_NATS_TLS_*).
func NATSAuth(cfg config.Config) queue.Auth {
	return queue.Auth{CredsFile: cfg.NATS.CredsFile, TLSCAFile: cfg.NATS.TLSCAFile, TLSCertFile: cfg.NATS.TLSCertFile, TLSKeyFile: cfg.NATS.TLSKeyFile}
}

// OpsAddr is the address the ops listener is bound to.
func (in *Infra) OpsAddr() string { return in.ops.Addr() }

// ServeOps keeps the ops listener (serving since Start) until ctx ends, then shuts it down; it
// returns early with the error of a listener that failed.
func (in *Infra) ServeOps(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return in.stopOps()
	case err := <-in.opsDone:
		in.opsDone <- err // for stopOps
		_ = in.stopOps()
		return err
	}
}

// Close releases everything Start acquired, in reverse order. NATS is drained so that messages
// already published by this process reach the server before it goes away.
func (in *Infra) Close() {
	_ = in.stopOps()
	if in.NATS != nil {
		done := make(chan struct{})
		in.NATS.SetClosedHandler(func(*nats.Conn) { close(done) })
		if err := in.NATS.Drain(); err != nil {
			in.NATS.Close()
		} else {
			select {
			case <-done:
			case <-time.After(time.Second):
				in.NATS.Close()
			}
		}
	}
	if in.Pool != nil {
		in.Pool.Close()
	}
	if in.Embedded != nil {
		in.Embedded.Shutdown()
		in.Embedded.WaitForShutdown()
	}
}

// ErrUsage marks a command-line mistake; mains exit 2 for it.
var ErrUsage = errors.New("usage")

// Run serves the ops listener and runs each of parts until ctx ends or one of them fails; then
// it cancels the rest and waits for them, so in-flight work drains before the process exits.
func (in *Infra) Run(ctx context.Context, parts ...func(context.Context) error) error {
	in.started()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return in.ServeOps(gctx) })
	if in.Streams != nil {
		g.Go(func() error { return in.Streams.Run(gctx) })
	}
	for _, p := range parts {
		g.Go(func() error { return p(gctx) })
	}
	return g.Wait()
}

// errShuttingDown is the failing readiness check of a process that was told to stop.
var errShuttingDown = errors.New("shutting down")

// Linger returns a context that ends delay after ctx does. From ctx's end, /readyz fails with a
// "shutdown" check, so that a load balancer that probes it stops sending new requests while the
// process still serves them; only then does the process stop accepting connections and drain
// (MAILVET_SHUTDOWN_DELAY; docs/operations.md, "Start-up and shutdown"). Call stop once the
// returned context is no longer needed.
func (in *Infra) Linger(ctx context.Context, delay time.Duration) (_ context.Context, stop func()) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var timer atomic.Pointer[time.Timer]
	unhook := context.AfterFunc(ctx, func() {
		in.Ready.Add("shutdown", func(context.Context) error { return errShuttingDown })
		if delay > 0 {
			in.Log.Info("shutting down: not ready, serving on before the drain", "delay", delay)
		}
		timer.Store(time.AfterFunc(delay, cancel))
	})
	return out, func() {
		unhook()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel()
	}
}

// RunFunc is a binary's whole program, with its environment passed in so tests can call it.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Main runs a binary: it cancels the context on SIGINT or SIGTERM (so run drains and returns),
// prints a failure as "name: error" and exits with ExitCode's status. The first signal gives the
// signals back to their default action, so a second one ends the process at once, as a kill
// would, instead of waiting out a drain that may take minutes (docs/operations.md, "Start-up and
// shutdown").
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	code := ExitCode(ctx, err)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	os.Exit(code)
}

// ExitCode is a binary's exit status for run's outcome err, ctx being the context Main cancels on
// SIGINT or SIGTERM: 0 for success, and for a stop asked for while the process was still waiting
// for Postgres or NATS (the waits end with the signal as their cause: the process did what it was
// told, and an orchestrator stopping a starting pod must not see a crash); 2 for a command-line
// mistake; 1 for any other failure (docs/operations.md, "What you run").
func ExitCode(ctx context.Context, err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
		return 0
	}
	return 1
}

// Parse parses a command line for a binary or one of its commands. help is true when -h asked
// for the usage, which fs has printed: the caller stops and it is no failure. A bad flag (fs
// has printed the usage and the reason) is ErrUsage.
func Parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, ErrUsage
	}
	return false, nil
}
