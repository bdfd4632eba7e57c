package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/api"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// system is what `api -dev -demo` runs in one process — Postgres pool, embedded NATS, the
// verification engine, in-process verifier workers, a mail world on loopback — with one API
// server per admission window under test, each on its own loopback listener, sharing all of it.
type system struct {
	cfg   config.Config
	pool  *pgxpool.Pool
	sql   *sqlTally
	nats  *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	world *mailsim.World
	store *account.Store
	// fleet is a dispatcher of its own, for the fleet-alone baseline.
	fleet *queue.Dispatcher

	apis    map[time.Duration]*apiServer
	stop    context.CancelFunc
	workers *errgroup.Group
	closers []func()
}

type apiServer struct {
	srv  *api.Server
	http *app.HTTPServer
	base string
	done chan error
}

// loadDomains are the mail world's domains for fleet-probed addresses, each with its own mail
// server, as a real address list spreads over many; loadUsers of each exist.
const (
	loadDomains = 10
	loadUsers   = 100
)

// start builds the system on a fresh database named dbName.
func start(ctx context.Context, dbURL string, rtt time.Duration, windows []time.Duration) (*system, error) {
	s := &system{apis: map[time.Duration]*apiServer{}}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	world, err := mailsim.Start(mailsim.Options{RTT: rtt})
	if err != nil {
		return nil, fmt.Errorf("mail world: %w", err)
	}
	s.world = world
	s.closers = append(s.closers, world.Close)
	users := make([]string, loadUsers)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	for d := range loadDomains {
		name := fmt.Sprintf("d%d.load.example", d)
		if _, err := world.AddServer(mailsim.ServerOptions{Name: "mx." + name}); err != nil {
			return nil, err
		}
		world.AddDomain(name, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx." + name}}, Users: users})
	}

	env := map[string]string{
		"DATABASE_URL":             dbURL,
		"MAILVET_DNS_RESOLVER":     world.DNSAddr(),
		"MAILVET_SMTP_PORT":        strconv.Itoa(world.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS": mailsim.Prefix.String(),
		// A customer whose limits are out of the way: the run measures the replica, not the plan.
		"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "100000000",
		"MAILVET_PLAN_SCALE_MONTHLY_CALLS":      "100000000",
		"MAILVET_HTTP_ADDR":                     "127.0.0.1:0",
		"MAILVET_METRICS_ADDR":                  "127.0.0.1:0",
	}
	if s.cfg, err = config.Load(config.RoleAPI, true, func(k string) string { return env[k] }); err != nil {
		return nil, err
	}

	if err := database.EnsureDatabase(ctx, dbURL); err != nil {
		return nil, err
	}
	if _, err := database.Migrate(ctx, dbURL, nil); err != nil {
		return nil, err
	}
	pc, err := database.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	s.sql = &sqlTally{}
	database.AddTracer(pc.ConnConfig, s.sql)
	if s.pool, err = database.OpenConfig(ctx, pc); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.pool.Close)
	s.store = account.NewStore(s.pool)

	dir, err := os.MkdirTemp("", "mailvet-loadtest-nats-")
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { os.RemoveAll(dir) })
	if s.nats, err = queue.StartEmbedded(queue.EmbeddedOptions{StoreDir: dir}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { s.nats.Shutdown(); s.nats.WaitForShutdown() })
	if s.nc, err = nats.Connect(s.nats.ClientURL()); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.nc.Close)
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	layout := app.Layout(s.cfg)
	if err := queue.EnsureStreams(ctx, s.js, layout, nil); err != nil {
		return nil, err
	}

	// The engine as `api -dev -demo` configures it for its mail world (cmd/api, engineConfig).
	ecfg, err := verifyworker.EngineConfig(s.cfg)
	if err != nil {
		return nil, err
	}
	ecfg.SMTP.Proxy = ""
	ecfg.SMTP.AllowCIDRs = append(slices.Clone(ecfg.SMTP.AllowCIDRs), mailsim.Prefix)
	engine, err := verify.New(ecfg)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, engine.Close)
	log := app.NewLogger(io.Discard, "loadtest")

	wctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.workers, wctx = errgroup.WithContext(wctx)
	for _, part := range verifyworker.Services(verifyworker.Deps{Pool: s.pool, NATS: s.nc, JS: s.js, Layout: layout, Pipe: engine,
		Log: log, Ready: health.NewChecker(0)}.WithConfig(s.cfg)) {
		s.workers.Go(func() error { return part(wctx) })
	}
	s.fleet = queue.NewDispatcher(s.nc, s.js, layout)

	for _, w := range windows {
		cfg := s.cfg
		cfg.AdmissionWindow = w
		srv := api.New(api.Deps{Config: cfg, Log: log, Pool: s.pool, NATS: s.nc, JS: s.js, Layout: layout,
			Ready: health.NewChecker(0), Local: engine})
		hs, err := app.Listen("127.0.0.1:0", srv.Handler())
		if err != nil {
			srv.Close()
			return nil, err
		}
		a := &apiServer{srv: srv, http: hs, base: "http://" + hs.Addr(), done: make(chan error, 1)}
		go func() { a.done <- hs.Serve(wctx, time.Second, log) }()
		s.apis[w] = a
	}
	if err := s.waitForWorkers(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// waitForWorkers waits until the fleet answers a request.
func (s *system) waitForWorkers(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := s.fleet.VerifyOne(c, fleetAddress(0))
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the verifier workers did not answer: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleetAddress is the i-th fleet-probed address: spread over the domains, two in three existing.
func fleetAddress(i int) string {
	return fmt.Sprintf("u%d@d%d.load.example", (i/loadDomains)%(loadUsers*3/2), i%loadDomains)
}

// customer creates a scale-tier account and a standard key of it.
func (s *system) customer(ctx context.Context) (accountID, key string, err error) {
	a, err := s.store.Create(ctx, account.NewAccount{Tier: plan.Scale})
	if err != nil {
		return "", "", err
	}
	k, err := s.store.CreateStandardKey(ctx, a.ID, "loadtest", s.cfg.Plans.MaxKeys)
	if err != nil {
		return "", "", err
	}
	return a.ID, k.Raw, nil
}

// stopAPIs stops the API servers and waits for what they still write behind their responses
// (usage rows and hold releases), so that the usage log is final.
func (s *system) stopAPIs() {
	s.stop()
	for _, a := range s.apis {
		<-a.done
		a.srv.Close()
	}
	s.apis = nil
}

func (s *system) close() {
	if s.stop != nil {
		s.stopAPIs()
		_ = s.workers.Wait()
	}
	if s.fleet != nil {
		s.fleet.Close()
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// dropDatabase removes the run's database.
func dropDatabase(ctx context.Context, dbURL, name string) error {
	admin, err := pgx.Connect(ctx, withDatabase(dbURL, "postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// sqlTally counts the API's Postgres round trips: single statements and batches (admission
// groups), with their time, so that the report can say where a request's time goes.
type sqlTally struct {
	mu                        sync.Mutex
	queries, batches, batched int
	queryTime, batchTime      time.Duration
	batchStarts, queryStarts  map[*pgx.Conn]time.Time
	batchSizes                map[*pgx.Conn]int
	largestBatch              int
}

type tallySnapshot struct {
	queries, batches, batched int
	queryTime, batchTime      time.Duration
	largestBatch              int
}

func (t *sqlTally) snapshot() tallySnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tallySnapshot{t.queries, t.batches, t.batched, t.queryTime, t.batchTime, t.largestBatch}
}

func (t *sqlTally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queries, t.batches, t.batched, t.queryTime, t.batchTime, t.largestBatch = 0, 0, 0, 0, 0, 0
}

func (t *sqlTally) TraceQueryStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.queryStarts == nil {
		t.queryStarts = map[*pgx.Conn]time.Time{}
	}
	t.queryStarts[c] = time.Now()
	return ctx
}

func (t *sqlTally) TraceQueryEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queries++
	t.queryTime += time.Since(t.queryStarts[c])
}

func (t *sqlTally) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.batchStarts == nil {
		t.batchStarts, t.batchSizes = map[*pgx.Conn]time.Time{}, map[*pgx.Conn]int{}
	}
	t.batchStarts[c], t.batchSizes[c] = time.Now(), d.Batch.Len()
	return ctx
}

func (*sqlTally) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *sqlTally) TraceBatchEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.batchSizes[c]
	t.batches++
	t.batched += n
	t.largestBatch = max(t.largestBatch, n)
	t.batchTime += time.Since(t.batchStarts[c])
}
