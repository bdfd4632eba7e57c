// Package api is Mailvet's HTTP front: the Echo server, its middleware, one file per resource, and
// the single error-envelope mapping (docs/errors.md). It validates, authenticates and meters requests;
// network verification work is handed to the verifier workers over NATS.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/dashboard"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/httpbody"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verification"
)

// Deps are the dependencies of the API server.
type Deps struct {
	Config config.Config
	Log    *slog.Logger
	Pool   *pgxpool.Pool
	NATS   *nats.Conn
	JS     jetstream.JetStream
	// Layout is the deployment's NATS layout (app.Infra.Layout); the zero Layout is unprefixed.
	Layout  queue.Layout
	Ready   *health.Checker
	Metrics *prometheus.Registry
	// Portal opens billing portal sessions; nil means Stripe as configured (billing.NewStripe).
	Portal BillingPortal
	// Checkout opens Stripe Checkout for the dashboard's upgrades; nil means Stripe as configured.
	Checkout dashboard.Checkout
	// Mailer sends the dashboard's confirmation and password-reset mail; nil: no relay.
	Mailer dashboard.Mailer
	// Now is the clock; nil means time.Now. Tests pin it to check month boundaries.
	Now func() time.Time
	// Local runs the local verification layers in-process (verify.Verifier).
	Local LocalVerifier
	// BodyReadTimeout bounds how long a request body may take to arrive; zero means
	// DefaultBodyReadTimeout. Tests shorten it.
	BodyReadTimeout time.Duration
}

// BillingPortal opens a billing portal session for a Stripe customer and returns its URL.
type BillingPortal interface {
	PortalURL(ctx context.Context, customerID, returnURL string) (string, error)
}

// MaxBodyBytes is the request body limit (docs/api.md, "Limits").
const MaxBodyBytes = 2 << 20

// DefaultBodyReadTimeout is the time a request body has to arrive, counted from the end of its
// headers. The largest request (2 MB) arrives in well under a second on any working connection;
// the bound is for clients that trickle a body to hold a connection and a handler open.
const DefaultBodyReadTimeout = 10 * time.Second

// WriteStall is how long the client of a stream or a batch has to take each part of its answer
// (a stream's line, a few KB of a batch's body; docs/api.md, "Limits"): a client that reads
// nothing for that long, its TCP window full, is treated as one that went away. It bounds each
// part, not the whole answer, so a slow reader that keeps reading is not cut by it.
const WriteStall = 10 * time.Second

// StreamWriteLimit and BatchWriteLimit are how long after it began an answer may still be
// written to its client (docs/api.md, "Limits"): the route's deadline plus one stall. They keep
// a client that trickles its answer in from holding the request open past its hold's lifetime
// (the deadline plus a minute, docs/reliability.md, "Metering guarantees").
const (
	StreamWriteLimit = verification.StreamDeadline + WriteStall
	BatchWriteLimit  = verification.BatchDeadline + WriteStall
)

// Server is the API server.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	pool   *pgxpool.Pool
	nc     *nats.Conn
	js     jetstream.JetStream
	layout queue.Layout
	ready  *health.Checker
	echo   *echo.Echo
	now    func() time.Time

	bodyTimeout time.Duration
	// writeStall bounds how long a stream or batch waits for its client to take a part of its
	// answer, and streamWriteLimit and batchWriteLimit how long after the request began it is
	// written at all (writeBound).
	writeStall       time.Duration
	streamWriteLimit time.Duration
	batchWriteLimit  time.Duration
	uploadIdle       time.Duration // the longest pause in an upload's body (httpbody)
	// uploadRateGrace is how long an upload runs before its minimum rate is checked (minRate).
	uploadRateGrace time.Duration
	// uploadReceive is how long an upload's file may take to arrive in all (listReceiveBudget).
	uploadReceive time.Duration

	accounts *account.Store
	portal   BillingPortal
	events   *billing.Events

	dispatch *queue.Dispatcher
	// ledger admits verify requests, each holding its emails until it ends, and bills what they
	// deliver behind their responses (usage.Ledger); Close writes what is queued.
	ledger *usage.Ledger
	// verify runs the verify routes' requests (package verification); the handlers adapt it.
	verify *verification.Service
	jobs   *job.Store
	lists  *list.Store
	// rejections writes the usage-log rows of refused verify requests behind their responses.
	rejections *usage.Rejections
	// refusals counts the verify routes' admission refusals (admission_metrics.go).
	refusals *prometheus.CounterVec

	// idem guards the routes that create something with Idempotency-Key (idempotency.go).
	idem *idempotency.Guard

	// dashboard serves /dashboard (package dashboard).
	dashboard *dashboard.Handler

	// email and mgmt are the authenticated route groups of routes.go.
	email *echo.Group
	mgmt  *echo.Group

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// New builds the server and registers its routes.
func New(d Deps) *Server {
	s := &Server{cfg: d.Config, log: d.Log, pool: d.Pool, nc: d.NATS, js: d.JS, layout: d.Layout, ready: d.Ready, now: d.Now, portal: d.Portal,
		dispatch: queue.NewDispatcher(d.NATS, d.JS, d.Layout), ledger: usage.NewGroupedLedger(d.Pool, d.Log, d.Config.AdmissionWindow), jobs: job.NewStore(d.Pool), lists: list.NewStore(d.Pool, list.Configured(d.Config.Lists.Retention)),
		rejections: usage.NewRejections(d.Pool, d.Log)}
	if s.now == nil {
		s.now = time.Now
	}
	s.verify = verification.New(verification.Config{Local: d.Local, Fleet: s.dispatch, Ledger: s.ledger, Pool: d.Pool, Log: d.Log, Now: s.now,
		SandboxRatePerMin: d.Config.SandboxRatePerMin, PublishDelivery: s.publishDelivery, Secrets: d.Config.Secrets,
		Lists: s.lists, JS: d.JS, Layout: d.Layout,
		ListLimits: verification.ListLimits{MaxBytes: d.Config.Lists.MaxBytes, MaxRows: d.Config.Lists.MaxRows},
		Uploads:    verification.UploadLimits{PerAddress: d.Config.Uploads.PerAddress, Free: d.Config.Uploads.Free}})
	s.idem = idempotency.New(d.Pool, s.now, func(c echo.Context) string { return principalOf(c).AccountID }, d.Log)
	s.idem.Scope = sandboxScope
	s.uploadIdle = httpbody.IdleTimeout
	s.uploadRateGrace = httpbody.IdleTimeout
	s.uploadReceive = listReceiveBudget
	s.bodyTimeout = d.BodyReadTimeout
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultBodyReadTimeout
	}
	s.writeStall, s.streamWriteLimit, s.batchWriteLimit = WriteStall, StreamWriteLimit, BatchWriteLimit
	stripe := billing.NewStripe(billingConfig(d.Config))
	if s.portal == nil {
		s.portal = stripe
	}
	checkout := d.Checkout
	if checkout == nil {
		checkout = stripe
	}
	s.dashboard = dashboard.New(dashboard.Deps{Config: dashboardConfig(d.Config), Log: d.Log, Pool: d.Pool, JS: d.JS, Layout: d.Layout,
		Portal: s.portal, Checkout: checkout, Verify: s.verify, Refused: s.dashboardRefused, Mailer: d.Mailer, Now: s.now})
	s.accounts = account.NewStore(d.Pool)
	s.events = billing.NewEvents(d.Pool, d.Config.StripePrices)
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_http_requests_total", Help: "HTTP requests by route, method and status code.",
	}, []string{"route", "method", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mailvet_http_request_duration_seconds",
		Help:    "HTTP request latency by route.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route"})
	s.refusals = newAdmissionRefusals()
	if d.Metrics != nil {
		d.Metrics.MustRegister(s.requests, s.latency, s.refusals, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mailvet_usage_rejection_rows_dropped_total",
			Help: "Usage-log rows of rejected verify requests dropped because the datastore could not take them.",
		}, func() float64 { return float64(s.rejections.Dropped()) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mailvet_sync_reasks_total",
			Help: "Single verifications sent to another verifier because the one that took them went silent (killed or frozen).",
		}, func() float64 { return float64(s.dispatch.SilentWorkerReasks()) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mailvet_verify_items_withdrawn_total",
			Help: "Batch and stream items taken out of the work queue because their caller was answered without them (deadline, client gone, broker lost).",
		}, func() float64 { return float64(s.dispatch.WithdrawnItems()) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mailvet_verify_items_not_withdrawn_total",
			Help: "Batch and stream items left in the work queue after their caller was answered without them, because too many purges were already in flight.",
		}, func() float64 { return float64(s.dispatch.NotWithdrawnItems()) }), audit.Metric())
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	// A client's X-Request-Id is kept only if it is short and plain; otherwise RequestID makes one.
	e.Use(boundRequestID)
	e.Use(middleware.RequestID())
	e.Use(baseHeaders(strings.HasPrefix(d.Config.PublicURL, "https://")))
	e.Use(s.observe)
	e.Use(s.recoverPanics)
	e.Use(s.bodyDeadline)
	// The 2 MB body guard (docs/api.md, "Limits"). It refuses a too-large Content-Length before
	// reading and stops a body without one at the limit. A bulk-list upload is a file with limits
	// of its own (docs/lists.md). The dashboard bounds its bodies itself, at the same 2 MB, and
	// answers a form over it with its own page rather than the JSON envelope (docs/dashboard.md,
	// "Forms").
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: strconv.Itoa(MaxBodyBytes) + "B", Skipper: ownBodyLimit}))
	// A /v1 query string that Go's URL.Query would silently trim is refused (query.go).
	e.Use(strictQuery)
	e.Use(methodNotAllowed) // OPTIONS and Allow on the routes outside /v1 (routes.go)
	s.echo = e
	s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// observe logs one JSON line per request and records metrics. The route template, not the raw
// path, labels metrics so that ids in paths cannot blow up cardinality. Headers are never logged:
// they carry API keys.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := routeOf(c)
		status := c.Response().Status
		took := time.Since(start)
		s.requests.WithLabelValues(route, methodLabel(c.Request().Method), strconv.Itoa(status)).Inc()
		s.latency.WithLabelValues(route).Observe(took.Seconds())
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		s.log.LogAttrs(c.Request().Context(), level, "http request",
			slog.String("method", c.Request().Method), slog.String("route", route),
			slog.Int("status", status), slog.Duration("took", took),
			slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)))
		return nil
	}
}

// methodLabel is a request's method as the method label of mailvet_http_requests_total: one of
// HTTP's methods, or "other". Go's server accepts any token as a method, and a label taking each
// as sent would let any client add series without end (docs/operations.md, "Health, readiness
// and metrics"). The log line keeps the method as sent.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// routeOf is the route template that labels a request's log line and metrics. The dashboard is
// one wildcard route here; its own ServeMux records the page's pattern on the request it was
// given ("GET /dashboard/lists/{id}"), which is this request, so its pages are told apart by
// pattern, not logged all as /dashboard*, and ids in their paths still make no new labels.
func routeOf(c echo.Context) string {
	route := c.Path()
	if route == dashboardRoute {
		if p := c.Request().Pattern; p != "" {
			if _, path, ok := strings.Cut(p, " "); ok {
				p = path // the method is logged on its own
			}
			return p
		}
	}
	if route == "" {
		return "unmatched"
	}
	return route
}

// baseHeaders sets the headers of docs/security.md ("HTTP headers") before anything else can
// answer, so that refusals and the answers Echo makes itself carry them too. Every response is
// X-Content-Type-Options: nosniff, and Cache-Control: no-store: results, keys and account data
// are the customer's own, and no cache on the way may keep them (docs/api.md, "Conventions");
// the public documents (the error reference, /openapi.json) set their own. Under the dashboard's paths the dashboard's headers are set, its
// Content-Security-Policy among them, also on an answer its handler never sees: a method Echo
// does not route is refused here, in the envelope.
//
// https says the public URL (MAILVET_PUBLIC_URL) is https: customers reach the server over TLS,
// usually ended by a proxy in front of it (docs/deployment.md), so browsers are told to use
// nothing else for a year (hsts). With an http public URL (local development) they are not: it
// would keep a browser off that host's plain http for the year.
func baseHeaders(https bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			// Every answer is taken as the type it is labelled with: a JSON answer, a download
			// or an error that echoes the client's text is never sniffed into HTML or script.
			h.Set("X-Content-Type-Options", "nosniff")
			if https {
				h.Set("Strict-Transport-Security", hsts)
			}
			if strings.HasPrefix(c.Request().URL.Path, dashboard.Prefix) {
				dashboard.SetHeaders(h)
			} else {
				h.Set(echo.HeaderCacheControl, "no-store")
			}
			return next(c)
		}
	}
}

// hsts is the Strict-Transport-Security of an https deployment: a year, this host only. Neither
// includeSubDomains nor preload: the operator's other hosts under the same domain are theirs to
// decide, and a preload list entry outlives any deployment.
const hsts = "max-age=31536000"

// recoverPanics turns a panic into a 500 envelope; the stack goes to the log, never to the body.
// A panic after the response began (a stream, a download) can no longer change its status: the
// connection is cut without HTTP's final chunk, so that the client sees an incomplete answer
// rather than one that looks whole (docs/reliability.md, "An incomplete answer says so").
func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.log.Error("panic in handler", "route", c.Path(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()),
					"response_begun", c.Response().Committed)
				if c.Response().Committed {
					panic(http.ErrAbortHandler)
				}
				err = internalError()
			}
		}()
		return next(c)
	}
}

// bodyDeadline gives the request body s.bodyTimeout to arrive. The HTTP server cuts slow headers
// (ReadHeaderTimeout) but would wait for a trickled body as long as the client keeps sending; a
// body read that passes the deadline fails with a timeout, which jsonError answers with 408
// request_timeout. Requests without a body are left alone: the server is already reading their
// connection in the background to notice a client that goes away, and a deadline would end that
// read and cancel the request. A body read to its end clears the deadline the same way, so a long
// handler (a stream) is never cut by it.
func (s *Server) bodyDeadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// -1 is a body of unknown length (chunked). An upload has an idle deadline instead
		// (httpbody): a large file takes longer than any fixed one. Its first pause starts now,
		// not at the first read: a request refused before its body is read (a bad key, no
		// session) still has its unread body drained by the server, which must not wait forever.
		if c.Request().ContentLength != 0 {
			wait := s.bodyTimeout
			if isUpload(c) {
				wait = s.uploadIdle
			}
			err := http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(wait))
			if err != nil && !errors.Is(err, http.ErrNotSupported) {
				s.log.Warn("set body read deadline", "err", err)
			}
		}
		return next(c)
	}
}

// root sends whoever opens the server's bare address, a person with a browser, to the customer
// dashboard; the API itself is under /v1 (docs/api.md, "Operational routes").
func (s *Server) root(c echo.Context) error {
	return c.Redirect(http.StatusFound, "/dashboard/")
}

// healthz and readyz are served on the API port as well as on the metrics port, so a load
// balancer can probe the port it sends traffic to; there readyz names failing checks without
// their error text.
func (s *Server) healthz(c echo.Context) error {
	health.Healthz(c.Response(), c.Request())
	return nil
}

func (s *Server) readyz(c echo.Context) error {
	s.ready.PublicReadyz(c.Response(), c.Request())
	return nil
}

// BeginShutdown tells batches and streams in flight that the server is going away: they end
// within verification.StopGrace, a stream with its error line, instead of being cut off mid-line.
func (s *Server) BeginShutdown() { s.verify.BeginShutdown() }

// Shutdown stops accepting requests and waits for in-flight ones until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.echo.Shutdown(ctx) }

// Close writes the usage rows, hold releases and rejection rows still queued. Call it once the
// HTTP server has stopped.
func (s *Server) Close() {
	s.BeginShutdown()
	s.ledger.Close()
	s.dispatch.Close()
	s.rejections.Close()
	s.dashboard.WaitMail() // the dashboard's links on their way to the relay (at most 45 s each)
}
