package api

// Benchmarks of the verify API end to end — real HTTP over loopback, real Postgres, an embedded
// NATS server, a verifier worker and a mail world — for issue 5 (sync throughput, added latency
// on a cached domain, the 1,000-address stream) and issue 6 (async request to callback). All
// heavy set-up happens inside the Benchmark functions, so `go test` without -bench runs none of
// it. Commands and results: BENCHMARKS.md, section "Verify API (issue 5) and async callback
// latency".

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
	"github.com/mailvet/mailvet/internal/webhook"
)

// benchRTT is the mail world's round-trip time of the engine's own benchmarks
// (internal/verify/bench_test.go).
const benchRTT = 20 * time.Millisecond

// benchOpts extend setupVerify's options for benchmarks: the mail world's RTT, extra
// configuration, and whether to start a verifier worker.
type benchOpts struct {
	rtt      time.Duration
	env      map[string]string
	noWorker bool
	sql      *sqlTimes // when set, the API's Postgres statements are timed into it
}

// benchBundle is setupVerify's world for a testing.TB (setupVerify needs a *testing.T), plus the
// API served over real HTTP on loopback and a client with enough idle connections.
type benchBundle struct {
	cfg     config.Config
	pool    *pgxpool.Pool
	store   *account.Store
	srv     *Server
	mail    *mailsim.World
	natsURL string
	engine  *verify.Verifier // the API's local layers and, unless noWorker, the worker's pipeline
	ts      *httptest.Server
	client  *http.Client
}

// setupBench builds what setupVerify builds — mx.acme.test serving acme.test (ann, bob, info),
// Postgres, embedded NATS with Mailvet's streams, the API with its local layers — with the
// scale tier's rate limit raised out of the way, and serves the API with httptest.NewServer.
func setupBench(tb testing.TB, o benchOpts) *benchBundle {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mail, err := mailsim.Start(mailsim.Options{RTT: o.rtt})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(mail.Close)
	if _, err := mail.AddServer(mailsim.ServerOptions{Name: "mx.acme.test"}); err != nil {
		tb.Fatal(err)
	}
	mail.AddDomain("acme.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.acme.test"}}, Users: []string{"ann", "bob", "info"}})

	env := map[string]string{
		"MAILVET_DNS_RESOLVER":                  mail.DNSAddr(),
		"MAILVET_SMTP_PORT":                     fmt.Sprint(mail.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS":              mailsim.Prefix.String(),
		"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "100000000",
	}
	for k, v := range o.env {
		env[k] = v
	}
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string { return env[k] })
	if err != nil {
		tb.Fatal(err)
	}
	pool := pgtest.New(tb)
	if o.sql != nil {
		pc := pool.Config()
		database.AddTracer(pc.ConnConfig, o.sql) // next to the deadline tracer, not instead of it
		if pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(pool.Close)
	}
	store := account.NewStore(pool)
	ns := natstest.Server(tb)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		tb.Fatal(err)
	}
	engine, err := verify.New(engineConfig(tb, cfg))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(engine.Close)
	srv := New(Deps{Config: cfg, Log: app.NewLogger(io.Discard, "bench"), Pool: pool, Ready: health.NewChecker(0),
		NATS: nc, JS: js, Local: engine})
	tb.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	tb.Cleanup(ts.Close)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	tb.Cleanup(tr.CloseIdleConnections)
	bb := &benchBundle{cfg: cfg, pool: pool, store: store, srv: srv, mail: mail, natsURL: ns.ClientURL(),
		engine: engine, ts: ts, client: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
	if !o.noWorker {
		bb.startWorker(tb, engine)
	}
	return bb
}

// startWorker runs a verifier worker with pipe, like a separate process.
func (bb *benchBundle) startWorker(tb testing.TB, pipe verifyworker.Pipeline) {
	tb.Helper()
	startVerifier(tb, bb.pool, bb.natsURL, pipe, bb.srv)
}

// customer makes an account of tier and returns a standard key of it.
func (bb *benchBundle) customer(tb testing.TB, tier plan.Tier) string {
	tb.Helper()
	ctx := context.Background()
	a, err := bb.store.Create(ctx, account.NewAccount{Tier: tier})
	pgtest.Must(tb, err, "create account")
	k, err := bb.store.CreateStandardKey(ctx, a.ID, "bench", plan.Defaults().MaxKeys)
	pgtest.Must(tb, err, "create standard key")
	return k.Raw
}

// post sends a JSON body to the API over HTTP; the caller closes the response body.
func (bb *benchBundle) post(path, key string, body []byte) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, bb.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	return bb.client.Do(req)
}

// postRead is post plus reading the whole answer.
func (bb *benchBundle) postRead(path, key string, body []byte) (int, []byte, error) {
	resp, err := bb.post(path, key, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// percentile is the nearest-rank p-quantile (0 < p ≤ 1) of ds; ds is sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// closedLoop runs do from a fixed pool of clients, once per token that next hands out, and
// returns every latency and the wall time from the first token to the last answer. Errors are
// counted; the first is returned.
func closedLoop(clients int, next func() bool, do func(client int) (time.Duration, error)) (lat []time.Duration, wall time.Duration, errs int, first error) {
	work := make(chan struct{})
	per := make([][]time.Duration, clients)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				d, err := do(c)
				if err != nil {
					mu.Lock()
					if errs++; first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				per[c] = append(per[c], d)
			}
		}()
	}
	start := time.Now()
	for next() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	wall = time.Since(start)
	for _, p := range per {
		lat = append(lat, p...)
	}
	return lat, wall, errs, first
}

// BenchmarkSyncVerifyInvalid is issue 5's throughput target: one API replica and one verifier
// worker, Postgres and NATS on this machine, synchronous verifies of a syntax-invalid address
// (decided by the API's local layers: key look-up, then admission with the usage row, no NATS
// round trip) from 32 concurrent clients over loopback HTTP with kept-alive connections.
// Target: ≥ 1,000 requests/s with p99 < 50 ms. Run with a fixed count, e.g. -benchtime=5000x.
//
// accounts=1 sends everything as one account, with its rate limit raised out of the way: the
// worst case, as every admission of one account waits for the one before it to commit (its rate
// window row is locked until then). accounts=32 gives each client its own account, as production
// traffic spreads over many (a scale account may send 1,000 a minute).
func BenchmarkSyncVerifyInvalid(b *testing.B) {
	for _, accounts := range []int{1, 32} {
		b.Run(fmt.Sprintf("accounts=%d", accounts), func(b *testing.B) { benchSyncVerifyInvalid(b, accounts) })
	}
}

func benchSyncVerifyInvalid(b *testing.B, accounts int) {
	const clients = 32
	bb := setupBench(b, benchOpts{})
	keys := make([]string, accounts)
	for i := range keys {
		keys[i] = bb.customer(b, plan.Scale)
	}
	body := []byte(`{"email":"not-an-address"}`)
	want := []byte(`"failed_check":"syntax"`)
	do := func(client int) (time.Duration, error) {
		start := time.Now()
		code, raw, err := bb.postRead("/v1/email/verify", keys[client%accounts], body)
		took := time.Since(start)
		switch {
		case err != nil:
			return took, err
		case code != http.StatusOK || !bytes.Contains(raw, want):
			return took, fmt.Errorf("status %d: %s", code, raw)
		}
		return took, nil
	}
	// Warm-up, not timed: every client's connection and the API's Postgres connections open.
	n := 0
	if _, _, errs, err := closedLoop(clients, func() bool { n++; return n <= 10*clients }, do); errs > 0 {
		b.Fatalf("warm-up: %d errors, first: %v", errs, err)
	}

	lat, wall, errs, err := closedLoop(clients, b.Loop, do)
	if errs > 0 {
		b.Fatalf("%d of %d requests failed, first: %v", errs, errs+len(lat), err)
	}
	b.ReportMetric(float64(len(lat))/wall.Seconds(), "req/s")
	b.ReportMetric(millis(percentile(lat, 0.50)), "p50-ms")
	b.ReportMetric(millis(percentile(lat, 0.99)), "p99-ms")
}

// BenchmarkCachedDeliverable is issue 5's added-latency target: a deliverable address of a domain
// whose MX and catch-all answers are cached, on an open SMTP session, verified sequentially (a)
// in-process with engine.Verify and (b) with POST /v1/email/verify over loopback HTTP, through
// NATS request/reply to the worker, which runs the same engine. Iterations alternate (a) and (b).
// Target: the median of (b) is at most 2 ms above the median of (a). rtt=20ms is the engine
// benchmarks' world (one SMTP round trip per address); rtt=0s isolates the pipeline's own cost.
// To show where the added time goes, each iteration also times the API's dispatch alone (NATS
// request/reply to the worker, nats-p50-ms), reads the handler's own latency_ms (handler-p50-ms:
// admission, local layers, dispatch), and times the API's Postgres statements (sql-*-ms).
func BenchmarkCachedDeliverable(b *testing.B) {
	for _, rtt := range []time.Duration{0, benchRTT} {
		b.Run("rtt="+rtt.String(), func(b *testing.B) { benchCachedDeliverable(b, rtt) })
	}
}

func benchCachedDeliverable(b *testing.B, rtt time.Duration) {
	sql := &sqlTimes{}
	bb := setupBench(b, benchOpts{rtt: rtt, sql: sql})
	key := bb.customer(b, plan.Scale)
	ctx := context.Background()
	const email = "bob@acme.test"
	body := []byte(`{"email":"` + email + `"}`)
	// api returns the result's latency_ms: the handler's own time from binding the body to the
	// worker's answer (admission, local layers, NATS round trip, the worker's verification).
	api := func() (float64, error) {
		code, raw, err := bb.postRead("/v1/email/verify", key, body)
		if err != nil {
			return 0, err
		}
		var r verdict.Result
		if err := json.Unmarshal(raw, &r); err != nil || code != http.StatusOK || r.Status != verdict.StatusDeliverable {
			return 0, fmt.Errorf("status %d: %s", code, raw)
		}
		return r.LatencyMS, nil
	}
	inproc := func() error {
		if r := bb.engine.Verify(ctx, email); r.Status != verdict.StatusDeliverable {
			return fmt.Errorf("in-process: %+v", r)
		}
		return nil
	}
	// nats is the API's dispatch alone: NATS request/reply to the worker, no HTTP, no Postgres.
	dispatch := func() error {
		r, err := bb.srv.dispatch.VerifyOne(ctx, email)
		if err != nil || r.Status != verdict.StatusDeliverable {
			return fmt.Errorf("dispatch: %+v, %v", r, err)
		}
		return nil
	}
	// Warm the MX and catch-all caches, the SMTP session, the HTTP connection and the pools.
	if r := bb.engine.Verify(ctx, "ann@acme.test"); r.Status != verdict.StatusDeliverable {
		b.Fatalf("warm-up: %+v", r)
	}
	for range 20 {
		if _, err := api(); err != nil {
			b.Fatal(err)
		}
		if err := errors.Join(inproc(), dispatch()); err != nil {
			b.Fatal(err)
		}
	}

	var engineLat, natsLat, apiLat, handlerLat []time.Duration
	sql.start()
	for b.Loop() {
		t0 := time.Now()
		if err := inproc(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := dispatch(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		handler, err := api()
		if err != nil {
			b.Fatal(err)
		}
		engineLat = append(engineLat, t1.Sub(t0))
		natsLat = append(natsLat, t2.Sub(t1))
		apiLat = append(apiLat, time.Since(t2))
		handlerLat = append(handlerLat, time.Duration(handler*float64(time.Millisecond)))
	}
	e50, a50 := millis(percentile(engineLat, 0.5)), millis(percentile(apiLat, 0.5))
	b.ReportMetric(e50, "engine-p50-ms")
	b.ReportMetric(a50, "api-p50-ms")
	b.ReportMetric(a50-e50, "added-p50-ms")
	b.ReportMetric(millis(percentile(apiLat, 0.9)), "api-p90-ms")
	b.ReportMetric(millis(percentile(natsLat, 0.5)), "nats-p50-ms")
	b.ReportMetric(millis(percentile(handlerLat, 0.5)), "handler-p50-ms")
	// Where the API's own time goes in Postgres: client-side round-trip medians per statement.
	for _, label := range []string{"auth", "admit", "bill"} {
		b.ReportMetric(millis(percentile(sql.by[label], 0.5)), "sql-"+label+"-ms")
	}
}

// sqlTimes is a pgx QueryTracer that times the API's statements on the verify path, from the
// client side (send to last byte of the answer), once start has been called.
type sqlTimes struct {
	mu sync.Mutex
	on bool
	by map[string][]time.Duration
}

type sqlStartKey struct{}

type sqlStart struct {
	at    time.Time
	label string
}

func (s *sqlTimes) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on, s.by = true, map[string][]time.Duration{}
}

// sqlLabel names the statements of the sync verify path: the key look-up (auth.Lookup), the
// admission that holds the email (usage.Admit), and the bill that writes its usage row and
// releases the hold behind the response (usage.Ledger, off the response's path).
func sqlLabel(sql string) string {
	switch {
	case strings.Contains(sql, "FROM api_keys"):
		return "auth"
	case strings.Contains(sql, "INTO rate_windows"):
		return "admit"
	case strings.Contains(sql, "INSERT INTO usage_log"):
		return "bill"
	}
	return ""
}

func (s *sqlTimes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlStartKey{}, sqlStart{at: time.Now(), label: sqlLabel(d.SQL)})
}

func (s *sqlTimes) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	st, ok := ctx.Value(sqlStartKey{}).(sqlStart)
	if !ok || st.label == "" {
		return
	}
	took := time.Since(st.at)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.by[st.label] = append(s.by[st.label], took)
	}
}

// swapPipeline is the verifier worker's pipeline with an engine that can be replaced between
// iterations, so that every stream meets fresh caches and no open SMTP session, as
// BenchmarkVerifyBatch's fresh Verifier does, while the worker itself keeps running.
type swapPipeline struct {
	mu sync.RWMutex
	v  *verify.Verifier
}

func (p *swapPipeline) get() *verify.Verifier {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.v
}

func (p *swapPipeline) swap(v *verify.Verifier) (old *verify.Verifier) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, p.v = p.v, v
	return old
}

func (p *swapPipeline) Verify(ctx context.Context, raw string) verdict.Result {
	return p.get().Verify(ctx, raw)
}

func (p *swapPipeline) VerifyBatch(ctx context.Context, raws []string, each func(int, verdict.Result)) []verdict.Result {
	return p.get().VerifyBatch(ctx, raws, each)
}

// batchWorld scripts BenchmarkVerifyBatch's 1,000 addresses — 50 on each of 20 domains served by
// mx.shared.test, every odd local part non-existent — on domains named after tag, so that each
// run meets domains no cache has seen.
func batchWorld(w *mailsim.World, tag string) (raws []string, want map[string]verdict.Status) {
	want = map[string]verdict.Status{}
	for d := range 20 {
		dom := fmt.Sprintf("shared%02d.%s.test", d, tag)
		var users []string
		for u := range 50 {
			local := fmt.Sprintf("user%02d", u)
			addr := local + "@" + dom
			raws = append(raws, addr)
			if u%2 == 0 {
				users = append(users, local)
				want[addr] = verdict.StatusDeliverable
			} else {
				want[addr] = verdict.StatusUndeliverable
			}
		}
		w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.shared.test"}}, Users: users})
	}
	return raws, want
}

// BenchmarkStream1000 is issue 5's stream target: POST /v1/email/verify/stream of
// BenchmarkVerifyBatch's 1,000 addresses (20 ms RTT, one MX address, half unknown users,
// MaxPerHost 40, throttling after 10 rejections per session) finishes no slower than the
// engine's own VerifyBatch of the same addresses plus 20%. Each iteration measures both, each
// on a fresh engine and on domains never seen before: (a) VerifyBatch in-process; (b) the stream
// through the API, JetStream and one verifier worker (production options) whose engine is
// configured like the benchmark's, reading every line. Every verdict is checked in both.
func BenchmarkStream1000(b *testing.B) {
	bb := setupBench(b, benchOpts{rtt: benchRTT, noWorker: true, env: map[string]string{"MAILVET_SMTP_MAX_PER_HOST": "40"}})
	if bb.cfg.SMTPMaxPerHost != 40 {
		b.Fatalf("MaxPerHost %d", bb.cfg.SMTPMaxPerHost)
	}
	srv, err := bb.mail.AddServer(mailsim.ServerOptions{Name: "mx.shared.test", ThrottleAfter: 10, ThrottleDelay: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	newEngine := func() *verify.Verifier {
		v, err := verify.New(engineConfig(b, bb.cfg))
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	pipe := &swapPipeline{v: newEngine()}
	b.Cleanup(func() { pipe.get().Close() })
	bb.startWorker(b, pipe)
	key := bb.customer(b, plan.Scale)
	ctx := context.Background()

	type stats struct {
		took, first         time.Duration
		sessions, throttled int64
	}
	stream := func(raws []string, want map[string]verdict.Status) stats {
		body := mustJSON(b, map[string]any{"emails": raws})
		start := time.Now()
		resp, err := bb.post("/v1/email/verify/stream", key, body)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			b.Fatalf("stream: status %d: %s", resp.StatusCode, raw)
		}
		var st stats
		seen := map[string]bool{}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if len(seen) == 0 {
				st.first = time.Since(start)
			}
			var line struct {
				Email  string         `json:"email"`
				Status verdict.Status `json:"status"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				b.Fatalf("line %q: %v", sc.Text(), err)
			}
			if w, ok := want[line.Email]; !ok || seen[line.Email] || line.Status != w {
				b.Fatalf("stream: %s: %s, want %s (seen before: %v)", line.Email, line.Status, w, seen[line.Email])
			}
			seen[line.Email] = true
		}
		st.took = time.Since(start)
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
		if len(seen) != len(raws) {
			b.Fatalf("stream: %d lines, want %d", len(seen), len(raws))
		}
		return st
	}

	var engineRuns, streamRuns []stats
	for i := 0; b.Loop(); i++ {
		// (a) The engine on its own, as BenchmarkVerifyBatch runs it.
		raws, want := batchWorld(bb.mail, fmt.Sprintf("e%d", i))
		v := newEngine()
		srv.ResetStats()
		start := time.Now()
		res := v.VerifyBatch(ctx, raws, nil)
		took := time.Since(start)
		for k, r := range res {
			if r.Status != want[raws[k]] {
				b.Fatalf("engine: %s: %s, want %s", raws[k], r.Status, want[raws[k]])
			}
		}
		v.Close()
		ss := srv.Stats()
		engineRuns = append(engineRuns, stats{took: took, sessions: ss.Sessions, throttled: ss.Throttled})

		// (b) The same addresses on fresh domains through the API, the worker on a fresh engine.
		raws, want = batchWorld(bb.mail, fmt.Sprintf("s%d", i))
		pipe.swap(newEngine()).Close()
		srv.ResetStats()
		st := stream(raws, want)
		ss = srv.Stats()
		st.sessions, st.throttled = ss.Sessions, ss.Throttled
		streamRuns = append(streamRuns, st)
	}
	med := func(runs []stats, f func(stats) time.Duration) time.Duration {
		ds := make([]time.Duration, len(runs))
		for i, r := range runs {
			ds[i] = f(r)
		}
		return percentile(ds, 0.5)
	}
	sum := func(runs []stats, f func(stats) int64) float64 {
		var n int64
		for _, r := range runs {
			n += f(r)
		}
		return float64(n) / float64(len(runs))
	}
	e, s := med(engineRuns, func(x stats) time.Duration { return x.took }), med(streamRuns, func(x stats) time.Duration { return x.took })
	b.ReportMetric(millis(e), "engine-ms")
	b.ReportMetric(millis(s), "stream-ms")
	b.ReportMetric(float64(s)/float64(e), "ratio")
	b.ReportMetric(millis(med(streamRuns, func(x stats) time.Duration { return x.first })), "first-line-ms")
	b.ReportMetric(sum(engineRuns, func(x stats) int64 { return x.sessions }), "engine-sessions")
	b.ReportMetric(sum(streamRuns, func(x stats) int64 { return x.sessions }), "stream-sessions")
	b.ReportMetric(sum(streamRuns, func(x stats) int64 { return x.throttled }), "stream-throttled")
}

// hookHit is one callback the receiver got.
type hookHit struct {
	jobID string
	at    time.Time
}

// BenchmarkAsyncCallback is issue 6's latency target: from sending POST /v1/email/verify with a
// webhook_url (a deliverable address of a cached mail domain) to the receiver getting the signed
// callback. The path: the API stores the job and queues it on JetStream (202); the verifier
// worker's job runner verifies, stores result, usage row and delivery in one transaction and
// queues the delivery; a webhook worker (webhook.Services' options, plus a test CA as trusted
// root) claims it and POSTs it over HTTPS to a receiver on 127.0.0.1, reached through the name
// hooks.bench.test that the mail world's DNS resolves. Jobs run one at a time. Target: median
// under 50 ms.
func BenchmarkAsyncCallback(b *testing.B) {
	for _, rtt := range []time.Duration{0, benchRTT} {
		b.Run("rtt="+rtt.String(), func(b *testing.B) { benchAsyncCallback(b, rtt) })
	}
}

func benchAsyncCallback(b *testing.B, rtt time.Duration) {
	const hookHost, hookSecret = "hooks.bench.test", "bench-webhook-secret"
	bb := setupBench(b, benchOpts{rtt: rtt, env: map[string]string{"MAILVET_WEBHOOK_ALLOW_PRIVATE": "true"}})
	ca := tlstest.New(b, hookHost)

	hits := make(chan hookHit, 64)
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		at := time.Now()
		var cb struct {
			JobID  string         `json:"job_id"`
			Status verdict.Status `json:"status"`
		}
		_ = json.Unmarshal(raw, &cb)
		if webhook.Verify([]byte(hookSecret), raw, r.Header.Get(webhook.SignatureHeader)) != nil || cb.Status != verdict.StatusDeliverable {
			cb.JobID = "bad callback: " + string(raw) // never matches: the job times out and says why
		}
		select {
		case hits <- hookHit{jobID: cb.JobID, at: at}:
		default:
		}
		w.WriteHeader(http.StatusOK)
	}))
	rc.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf}}
	rc.StartTLS()
	b.Cleanup(rc.Close)
	bb.mail.AddDomain(hookHost, mailsim.Domain{A: []string{"127.0.0.1"}})
	hookURL := fmt.Sprintf("https://%s:%d/mailvet", hookHost, rc.Listener.Addr().(*net.TCPAddr).Port)

	// The webhook worker as webhook.Services builds it from the configuration
	// (MAILVET_WEBHOOK_ALLOW_PRIVATE, MAILVET_DNS_RESOLVER), plus the test CA: Services has no
	// way to pass roots, and SSL_CERT_FILE only counts if set before the process first loads
	// the system pool.
	nc, err := nats.Connect(bb.natsURL)
	if err != nil {
		b.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if !bb.cfg.WebhookAllowPrivate {
		b.Fatal("MAILVET_WEBHOOK_ALLOW_PRIVATE not applied")
	}
	ww, err := webhook.NewWorker(bb.pool, js, webhook.Options{
		Client: webhook.ClientOptions{AllowPrivate: bb.cfg.WebhookAllowPrivate, DNSResolver: bb.cfg.DNSResolver, RootCAs: ca.Pool},
		Log:    app.NewLogger(io.Discard, "webhook"),
	})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{ww.Run, ww.RunSweeper, ww.RunRetention} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(wctx) }()
	}
	b.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })

	key := bb.customer(b, plan.Scale)
	body := mustJSON(b, map[string]string{"email": "bob@acme.test", "webhook_url": hookURL, "webhook_secret": hookSecret})
	if r := bb.engine.Verify(context.Background(), "ann@acme.test"); r.Status != verdict.StatusDeliverable {
		b.Fatalf("warm-up: %+v", r)
	}
	job := func() (accepted, called time.Duration) {
		start := time.Now()
		code, raw, err := bb.postRead("/v1/email/verify", key, body)
		accepted = time.Since(start)
		if err != nil || code != http.StatusAccepted {
			b.Fatalf("status %d, err %v: %s", code, err, raw)
		}
		var r struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.JobID == "" {
			b.Fatalf("body %s", raw)
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case h := <-hits:
				if h.jobID == r.JobID {
					return accepted, h.at.Sub(start)
				}
				b.Logf("job %s: unexpected callback %q", r.JobID, h.jobID)
			case <-timeout:
				b.Fatalf("job %s: no callback within 10 s", r.JobID)
			}
		}
	}
	// Warm-up: the webhook client's DNS look-up, TLS connection and the consumers.
	for range 5 {
		job()
	}
	var acc, total []time.Duration
	for b.Loop() {
		a, t := job()
		acc = append(acc, a)
		total = append(total, t)
	}
	b.ReportMetric(millis(percentile(total, 0.5)), "p50-ms")
	b.ReportMetric(millis(percentile(total, 0.9)), "p90-ms")
	b.ReportMetric(millis(percentile(acc, 0.5)), "accept-p50-ms")
}
