package verifyworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// stuckPipeline takes a chunk and never finishes it until released: a worker that died holding
// a chunk, as far as JetStream and Postgres can tell.
type stuckPipeline struct {
	took    chan struct{}
	release chan struct{}
}

func (p *stuckPipeline) Verify(context.Context, string) verdict.Result { panic("not used") }

func (p *stuckPipeline) VerifyBatch(_ context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	select {
	case p.took <- struct{}{}:
	default:
	}
	<-p.release
	out := make([]verdict.Result, len(emails))
	for i, e := range emails {
		out[i] = verdict.Result{Email: e}
		out[i].Apply(verdict.OutcomeDeliverable)
	}
	return out
}

// runLists runs a list runner with pipe on its own NATS connection, like a separate process;
// adjust, if any, changes the runner's settings before it starts.
func runLists(t *testing.T, url string, store *list.Store, pipe verifyworker.Pipeline, adjust ...func(*verifyworker.ListRunner)) (nc *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	r := verifyworker.NewListRunner(store, js, pipe, app.NewLogger(io.Discard, "lists"))
	r.AckWait, r.Concurrency, r.SweepEvery = time.Second, 2, time.Hour
	for _, a := range adjust {
		a(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		nc.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("list runner did not stop")
		}
	})
	return nc
}

// A verifier that dies in the middle of a chunk loses nothing: its chunk goes to another after
// AckWait, the list completes with every address verified and billed exactly once, and the dead
// worker's late write (had it come back) changes nothing.
func TestListSurvivesAWorkerDyingMidChunk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	ctx := context.Background()
	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "account")
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 100, 4
	store := list.NewStore(pool, cfg)

	const unique = 1000
	var file strings.Builder
	for i := range unique {
		fmt.Fprintf(&file, "user%d@d%d.test\n", i, i%37)
		if i%10 == 0 {
			fmt.Fprintf(&file, "USER%d@d%d.test\n", i, i%37) // duplicates: verified and billed once
		}
	}
	rd, err := list.NewReader(strings.NewReader(file.String()), list.Text, "", list.Limits{MaxRows: 10_000, MaxLineBytes: 1024})
	pgtest.Must(t, err, "reader")
	l, err := store.Import(ctx, list.Upload{AccountID: acct.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder], Now: time.Now()}, rd)
	pgtest.Must(t, err, "import")
	if l.Unique != unique || l.Rows != unique+unique/10 {
		t.Fatalf("imported %d rows, %d unique", l.Rows, l.Unique)
	}
	chunks, err := store.Start(ctx, l.AccountID)
	pgtest.Must(t, err, "start")
	if len(chunks) != cfg.Window {
		t.Fatalf("started with %d chunks, want the window of %d", len(chunks), cfg.Window)
	}
	if err := queue.PublishChunks(ctx, b.js, queue.Layout{}, time.Second, chunks, nil); err != nil {
		t.Fatal(err)
	}

	stuck := &stuckPipeline{took: make(chan struct{}, 1), release: make(chan struct{})}
	dead := runLists(t, b.url, store, stuck)
	select {
	case <-stuck.took:
	case <-time.After(10 * time.Second):
		t.Fatal("the first worker took no chunk")
	}
	dead.Close() // killed: no ack, no progress reports, from now on

	live := &scriptedPipeline{}
	runLists(t, b.url, store, live)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := store.Get(ctx, acct.ID, l.ID)
		pgtest.Must(t, err, "get")
		if got.State == list.Completed {
			l = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list stuck at %d of %d, state %s", got.Verified, got.Unique, got.State)
		}
		time.Sleep(50 * time.Millisecond)
	}

	count := func(sql string, args ...any) int {
		var n int
		pgtest.Must(t, pool.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	checkOnce := func(when string) {
		if l.Verified != unique {
			t.Errorf("%s: verified %d, want %d", when, l.Verified, unique)
		}
		if n := usagetest.Count(usagetest.Rows(t, pool, acct.ID), func(r usagetest.Row) bool { return r.Route == "verify_list" }); n != unique {
			t.Errorf("%s: %d usage rows, want %d (once per unique address)", when, n, unique)
		}
		if n := usagetest.Of(t, pool, acct.ID).Billable; n != unique {
			t.Errorf("%s: monthly billable %d, want %d", when, n, unique)
		}
		if n := count(`SELECT coalesce(sum(n), 0) FROM list_counts WHERE list_id = $1`, l.ID); n != unique {
			t.Errorf("%s: counts add up to %d, want %d", when, n, unique)
		}
		if n := count(`SELECT count(*) FROM list_addresses WHERE list_id = $1 AND result IS NULL`, l.ID); n != 0 {
			t.Errorf("%s: %d addresses without a result", when, n)
		}
	}
	checkOnce("completed")
	if calls := live.calls.Load(); calls != unique {
		t.Errorf("the live worker verified %d addresses, want %d: the dead worker's chunk once more, nothing else", calls, unique)
	}

	// The dead worker comes back to life and writes its chunk: every address of it is written
	// already, so nothing changes.
	close(stuck.release)
	time.Sleep(300 * time.Millisecond)
	checkOnce("after the dead worker's late write")
}

// startList imports n addresses of domain as a list of a new account, starts it and publishes
// the chunks it hands out.
func startList(t *testing.T, b *bundle, pool *pgxpool.Pool, cfg list.Config, n int, domain string) (list.List, string) {
	t.Helper()
	ctx := context.Background()
	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "account")
	store := list.NewStore(pool, cfg)
	var file strings.Builder
	for i := range n {
		fmt.Fprintf(&file, "user%d@%s\n", i, domain)
	}
	rd, err := list.NewReader(strings.NewReader(file.String()), list.Text, "", list.Limits{MaxRows: 10_000, MaxLineBytes: 1024})
	pgtest.Must(t, err, "reader")
	l, err := store.Import(ctx, list.Upload{AccountID: acct.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder], Now: time.Now()}, rd)
	pgtest.Must(t, err, "import")
	chunks, err := store.Start(ctx, l.AccountID)
	pgtest.Must(t, err, "start")
	if err := queue.PublishChunks(ctx, b.js, queue.Layout{}, time.Second, chunks, nil); err != nil {
		t.Fatal(err)
	}
	return l, acct.ID
}

// waitList waits (bounded) until the list is no longer running, and returns it.
func waitList(t *testing.T, store *list.Store, acct string, l list.List, within time.Duration) list.List {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := store.Get(context.Background(), acct, l.ID)
		pgtest.Must(t, err, "get list")
		if got.State != list.Running {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("list still running after %v: %d of %d verified", within, got.Verified, got.Unique)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errorOf is why l failed, or "".
func errorOf(l list.List) string {
	if l.Error == nil {
		return ""
	}
	return *l.Error
}

// deliveries is how many chunk messages the list runners' consumer has delivered so far.
func deliveries(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, queue.StreamLists, queue.ConsumerListChunks)
	if err != nil {
		return 0 // not created yet
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.Delivered.Consumer
}

// waitDeliveries waits (bounded) until the consumer has delivered at least n chunk messages.
func waitDeliveries(t *testing.T, js jetstream.JetStream, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for deliveries(t, js) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d chunk deliveries, want %d", deliveries(t, js), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// budgetPipeline behaves like the SMTP prober facing a server that never answers: it works until
// its context ends, then answers every address unknown, as the prober does.
type budgetPipeline struct{ calls atomic.Int64 }

func (p *budgetPipeline) Verify(context.Context, string) verdict.Result { panic("not used") }

func (p *budgetPipeline) VerifyBatch(ctx context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	p.calls.Add(1)
	<-ctx.Done()
	return resultsOf(emails, verdict.OutcomeUnknown)
}

// resultsOf is one result of outcome for each of emails.
func resultsOf(emails []string, outcome verdict.Outcome) []verdict.Result {
	out := make([]verdict.Result, len(emails))
	for i, e := range emails {
		out[i] = verdict.Result{Email: e}
		out[i].Apply(outcome)
	}
	return out
}

// A chunk whose verification uses its whole budget is written with what the pipeline answered
// (its write has its own budget), once: it is not verified again and again until its list fails.
func TestListChunkThatUsesItsBudgetIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	cfg := list.Defaults()
	store := list.NewStore(pool, cfg)
	l, acct := startList(t, b, pool, cfg, 10, "slow.test")

	p := &budgetPipeline{}
	runLists(t, b.url, store, p, func(r *verifyworker.ListRunner) {
		r.ChunkBudget, r.MaxFailures = 200*time.Millisecond, 3
	})
	got := waitList(t, store, acct, l, 20*time.Second)
	if got.State != list.Completed || got.Verified != 10 {
		t.Fatalf("list %s with %d of 10 verified (error %q), want completed with all 10", got.State, got.Verified, errorOf(got))
	}
	if len(got.Counts) != 1 || got.Counts[0].Status != string(verdict.StatusUnknown) || got.Counts[0].N != 10 {
		t.Errorf("counts %+v, want 10 unknown", got.Counts)
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("the chunk was verified %d times, want once", n)
	}
}

// flakyPipeline calls fail(n) on its n-th batch (from 1); a batch fails (a panic, which the
// runner turns into an error that is not an outage) when fail returns true, and is otherwise
// deliverable.
type flakyPipeline struct {
	calls atomic.Int64
	fail  func(n int64) bool
}

func (p *flakyPipeline) Verify(context.Context, string) verdict.Result { panic("not used") }

func (p *flakyPipeline) VerifyBatch(_ context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	if p.fail(p.calls.Add(1)) {
		panic("flaky pipeline")
	}
	return resultsOf(emails, verdict.OutcomeDeliverable)
}

// Postgres unreachable for many more deliveries of a chunk than MaxFailures: the chunk keeps
// coming back and the list completes once Postgres returns — an outage is not a failure of the
// chunk. A real failure after the outage still has all of MaxFailures to itself. Both are counted
// in mailvet_list_chunk_failures_total, as outages and as one failure tried again.
func TestListChunkWaitsOutAPostgresOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dbURL := pgtest.URL(t)
	pool := pgtest.Pool(t, dbURL)
	proxied, proxy := pgtest.Proxied(t, dbURL)
	cfg := list.Defaults()
	store, cut := list.NewStore(pool, cfg), list.NewStore(pgtest.Pool(t, proxied), cfg)

	proxy.Cut()
	l, acct := startList(t, b, pool, cfg, 10, "outage.test")
	p := &flakyPipeline{fail: func(n int64) bool { return n == 1 }}
	const maxFailures = 2
	reg := prometheus.NewRegistry()
	runLists(t, b.url, cut, p, func(r *verifyworker.ListRunner) {
		r.MaxFailures, r.OutageRetry = maxFailures, 20*time.Millisecond
		verifyworker.CountChunkFailures(r, reg)
	})
	waitDeliveries(t, b.js, 3*maxFailures)
	if got, err := store.Get(context.Background(), acct, l.ID); err != nil || got.State != list.Running {
		t.Fatalf("during the outage: list %s, %v; want still running", got.State, err)
	}
	proxy.Restore()

	got := waitList(t, store, acct, l, 30*time.Second)
	if got.State != list.Completed || got.Verified != 10 {
		t.Fatalf("list %s with %d of 10 verified (error %q), want completed", got.State, got.Verified, errorOf(got))
	}
	if n := p.calls.Load(); n != 2 {
		t.Errorf("pipeline called %d times, want 2 (the failure after the outage, then the success)", n)
	}
	if got := chunkFailureCount(t, reg, "outage"); got < 3*maxFailures-1 {
		t.Errorf("mailvet_list_chunk_failures_total{outcome=\"outage\"} = %v after %d deliveries in the outage, want at least %d", got, 3*maxFailures, 3*maxFailures-1)
	}
	if got, failed := chunkFailureCount(t, reg, "retry"), chunkFailureCount(t, reg, "failed"); got != 1 || failed != 0 {
		t.Errorf("mailvet_list_chunk_failures_total retry %v, failed %v; want 1 and 0", got, failed)
	}
}

// A chunk that fails for good fails its list — but its message is dropped only once the list is
// recorded as failed. Here Postgres is cut just as the last allowed failure happens, so recording
// the failure fails: the chunk comes back, and the list is failed once Postgres returns.
func TestListFailsOnlyOnceTheFailureIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dbURL := pgtest.URL(t)
	pool := pgtest.Pool(t, dbURL)
	proxied, proxy := pgtest.Proxied(t, dbURL)
	cfg := list.Defaults()
	store, cut := list.NewStore(pool, cfg), list.NewStore(pgtest.Pool(t, proxied), cfg)

	const maxFailures = 3
	wasCut := make(chan struct{})
	p := &flakyPipeline{fail: func(n int64) bool {
		if n == maxFailures {
			proxy.Cut()
			close(wasCut)
		}
		return true
	}}
	l, acct := startList(t, b, pool, cfg, 10, "broken.test")
	runLists(t, b.url, cut, p, func(r *verifyworker.ListRunner) {
		r.MaxFailures, r.OutageRetry = maxFailures, 20*time.Millisecond
	})
	select {
	case <-wasCut:
	case <-time.After(20 * time.Second):
		t.Fatal("the pipeline was not called often enough")
	}
	waitDeliveries(t, b.js, deliveries(t, b.js)+3) // the chunk is still there, and comes back
	if got, err := store.Get(context.Background(), acct, l.ID); err != nil || got.State != list.Running {
		t.Fatalf("with Postgres cut: list %s, %v; want still running", got.State, err)
	}
	proxy.Restore()

	got := waitList(t, store, acct, l, 30*time.Second)
	if got.State != list.Failed || got.Error == nil || !strings.Contains(*got.Error, "could not be verified") {
		t.Fatalf("list %s (error %q), want failed, saying the chunk could not be verified", got.State, errorOf(got))
	}
	if n := p.calls.Load(); n != maxFailures+1 {
		t.Errorf("pipeline called %d times, want %d", n, maxFailures+1)
	}
}

// A worker that dies after its write's commit and before publishing the chunk the write handed
// out: the redelivered chunk finds nothing to verify, and publishes the handed-out chunk again, so
// the list completes without waiting for the stalled-list sweep.
func TestListResumesAfterAWorkerDiesBetweenWriteAndPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	ctx := context.Background()
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 5, 1
	store := list.NewStore(pool, cfg)
	l, acct := startList(t, b, pool, cfg, 15, "d.test") // three chunks, one at a time

	// The dying worker: it takes chunk 0 from the runners' consumer, writes it, and dies before
	// publishing chunk 1 and acknowledging chunk 0.
	spec := queue.ListChunksConsumer(2, time.Second) // as runLists's runner makes it
	cons, err := b.js.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Config)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var c list.Chunk
	for m := range batch.Messages() {
		pgtest.Must(t, json.Unmarshal(m.Data(), &c), "chunk message")
	}
	if c.ListID != l.ID || c.Chunk != 0 {
		t.Fatalf("took %+v, want chunk 0 of the list", c)
	}
	w, err := store.Work(ctx, c)
	pgtest.Must(t, err, "work")
	res := (&scriptedPipeline{}).VerifyBatch(ctx, []string{"x"}, nil)[0]
	results := make([]verdict.Result, len(w.Addresses))
	for i := range results {
		results[i] = res
	}
	out, err := store.Write(ctx, c, w, results, "")
	pgtest.Must(t, err, "write")
	if len(out.Next) != 1 || out.Next[0].Chunk != 1 {
		t.Fatalf("the write handed out %+v, want chunk 1", out.Next)
	}

	runLists(t, b.url, store, &scriptedPipeline{})
	got := waitList(t, store, acct, l, 30*time.Second)
	if got.State != list.Completed || got.Verified != 15 {
		t.Fatalf("list %s with %d of 15 verified, want completed", got.State, got.Verified)
	}
}

// heldPipeline probes until its context ends (a mail server that takes its time), reporting when
// it took a batch and handing back, when it is done, the error its context ended with.
type heldPipeline struct {
	took  chan struct{}
	ended chan error
}

func (p *heldPipeline) Verify(context.Context, string) verdict.Result { panic("not used") }

func (p *heldPipeline) VerifyBatch(ctx context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	p.took <- struct{}{}
	<-ctx.Done()
	p.ended <- ctx.Err()
	return resultsOf(emails, verdict.OutcomeUnknown)
}

// A list canceled or deleted while a chunk of it is being verified stops that chunk's probing
// within WatchEvery, not at the end of its budget; the chunk is acknowledged once, not counted as
// a failure and published again, and nothing is billed.
func TestListStoppedMidChunkStopsProbing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "delete"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pool := pgtest.New(t)
			ctx := context.Background()
			cfg := list.Defaults()
			store := list.NewStore(pool, cfg)
			l, acct := startList(t, b, pool, cfg, 10, "slow.test")

			p := &heldPipeline{took: make(chan struct{}, 4), ended: make(chan error, 4)}
			runLists(t, b.url, store, p, func(r *verifyworker.ListRunner) {
				r.ChunkBudget, r.WatchEvery, r.OutageRetry = time.Minute, 50*time.Millisecond, 20*time.Millisecond
			})
			select {
			case <-p.took:
			case <-time.After(20 * time.Second):
				t.Fatal("no runner took the chunk")
			}
			var err error
			if how == "cancel" {
				_, _, err = store.Cancel(ctx, acct, l.ID)
			} else {
				_, err = store.Delete(ctx, acct, l.ID)
			}
			pgtest.Must(t, err, how)
			stopped := time.Now()
			select {
			case err := <-p.ended:
				if err != context.Canceled {
					t.Fatalf("verification ended with %v, want it canceled", err)
				}
				if d := time.Since(stopped); d > 5*time.Second {
					t.Errorf("probing went on %v after the %s", d, how)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the chunk was still being verified 20 s after its list's %s", how)
			}

			// The message is acknowledged, and neither redelivered nor published again as failed.
			deadline := time.Now().Add(10 * time.Second)
			for {
				cons, err := b.js.Consumer(ctx, queue.StreamLists, queue.ConsumerListChunks)
				pgtest.Must(t, err, "consumer")
				info, err := cons.Info(ctx)
				pgtest.Must(t, err, "consumer info")
				if info.NumAckPending == 0 && info.NumPending == 0 {
					if info.Delivered.Consumer != 1 {
						t.Errorf("%d chunk deliveries, want 1", info.Delivered.Consumer)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("chunk not settled: %d pending ack, %d pending", info.NumAckPending, info.NumPending)
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case <-p.took:
				t.Error("the chunk of a stopped list was verified again")
			case <-time.After(300 * time.Millisecond):
			}
			if billed := len(usagetest.Rows(t, pool, acct)); billed != 0 {
				t.Errorf("%d usage rows for a list stopped before any result, want 0", billed)
			}
		})
	}
}
