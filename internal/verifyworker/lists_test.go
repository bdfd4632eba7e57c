package verifyworker_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// stuckPipeline takes a chunk and never finishes it until released: a worker that died holding
// a chunk, as far as JetStream and Postgres can tell.
type stuckPipeline struct {
	took    chan struct{}
	release chan struct{}
}

func (p *stuckPipeline) Verify(context.Context, string) verify.Result { panic("not used") }

func (p *stuckPipeline) VerifyBatch(_ context.Context, emails []string, _ func(int, verify.Result)) []verify.Result {
	select {
	case p.took <- struct{}{}:
	default:
	}
	<-p.release
	out := make([]verify.Result, len(emails))
	for i, e := range emails {
		out[i] = verify.Result{Email: e}
		out[i].Apply(verify.OutcomeDeliverable)
	}
	return out
}

// runLists runs a list runner with pipe on its own NATS connection, like a separate process.
func runLists(t *testing.T, url string, store *list.Store, pipe verifyworker.Pipeline) (nc *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	r := verifyworker.NewListRunner(store, js, pipe, app.NewLogger(io.Discard, "lists"))
	r.AckWait, r.Concurrency, r.SweepEvery = time.Second, 2, time.Hour
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
		if n := count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND route = 'verify_list'`, acct.ID); n != unique {
			t.Errorf("%s: %d usage rows, want %d (once per unique address)", when, n, unique)
		}
		if n := count(`SELECT billable FROM usage_monthly WHERE account_id = $1`, acct.ID); n != unique {
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
