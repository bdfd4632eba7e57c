package verifyworker_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// The list pipeline's fault paths (docs/lists.md, "How a list runs", "Cancel and delete",
// "Metering"), each checked against what a customer is promised: every unique address written
// once and billed once, counts that add up, one callback, and nothing kept unbilled or billed
// unkept whatever races with a chunk.

// simEngine is the real verification engine against a mailsim world on loopback in which the
// domains named have the mailboxes users (every other local part is unknown).
func simEngine(t *testing.T, users []string, domains ...string) *verify.Verifier {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if _, err := w.AddServer(mailsim.ServerOptions{Name: "mx.faults.test"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range domains {
		w.AddDomain(d, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.faults.test"}}, Users: users})
	}
	engine, err := verify.New(verify.Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 3 * time.Second, MaxPerHost: 8, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Close)
	return engine
}

// countingPipeline passes every batch to inner and counts how often each address was verified.
type countingPipeline struct {
	inner verifyworker.Pipeline
	mu    sync.Mutex
	seen  map[string]int
}

func (p *countingPipeline) Verify(ctx context.Context, raw string) verdict.Result {
	return p.inner.Verify(ctx, raw)
}

func (p *countingPipeline) VerifyBatch(ctx context.Context, raws []string, each func(int, verdict.Result)) []verdict.Result {
	p.mu.Lock()
	if p.seen == nil {
		p.seen = map[string]int{}
	}
	for _, r := range raws {
		p.seen[r]++
	}
	p.mu.Unlock()
	return p.inner.VerifyBatch(ctx, raws, each)
}

func (p *countingPipeline) times() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return copyCounts(p.seen)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// importList imports file (of format) as a list of a new Builder account with a callback URL,
// starts it and publishes the chunks it hands out.
func importList(t *testing.T, js jetstream.JetStream, pool *pgxpool.Pool, store *list.Store, format list.Format, file string) (list.List, string) {
	t.Helper()
	ctx := context.Background()
	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "account")
	rd, err := list.NewReader(strings.NewReader(file), format, "", list.Limits{MaxRows: 10_000, MaxLineBytes: 1024})
	pgtest.Must(t, err, "reader")
	l, err := store.Import(ctx, list.Upload{AccountID: acct.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder],
		Now: time.Now(), WebhookURL: "https://hooks.example.com/lists"}, rd)
	pgtest.Must(t, err, "import")
	chunks, err := store.Start(ctx, l.AccountID)
	pgtest.Must(t, err, "start")
	if err := queue.PublishChunks(ctx, js, queue.Layout{}, time.Second, chunks, nil); err != nil {
		t.Fatal(err)
	}
	return l, acct.ID
}

// ledger is what Postgres holds for one list and its account, as the checks compare it.
type ledger struct {
	state      list.State
	verified   int // lists.verified
	counted    int // the list's counts, summed
	written    int // unique addresses with a result
	usageRows  int // the account's verify_list usage rows
	billable   int // the account's billable count for the month
	held       int // units the account holds
	holds      int // holds the account has open
	deliveries int // callbacks created for the list
	event      string
	stored     int // rows, addresses, counts and list row left for the list
}

func readLedger(t *testing.T, pool *pgxpool.Pool, acct string, id uuid.UUID) ledger {
	t.Helper()
	ctx := context.Background()
	var g ledger
	var state *string
	err := pool.QueryRow(ctx, `SELECT
		(SELECT state FROM lists WHERE id = $1),
		coalesce((SELECT verified FROM lists WHERE id = $1), 0),
		(SELECT coalesce(sum(n), 0) FROM list_counts WHERE list_id = $1),
		(SELECT count(*) FROM list_addresses WHERE list_id = $1 AND result IS NOT NULL),
		(SELECT count(*) FROM deliveries WHERE list_id = $1),
		coalesce((SELECT string_agg(convert_from(body, 'UTF8')::jsonb->>'event', ',') FROM deliveries WHERE list_id = $1), ''),
		(SELECT count(*) FROM list_rows WHERE list_id = $1) + (SELECT count(*) FROM list_addresses WHERE list_id = $1) +
			(SELECT count(*) FROM list_counts WHERE list_id = $1) + (SELECT count(*) FROM lists WHERE id = $1)`, id).
		Scan(&state, &g.verified, &g.counted, &g.written, &g.deliveries, &g.event, &g.stored)
	pgtest.Must(t, err, "ledger")
	if state != nil {
		g.state = list.State(*state)
	}
	g.usageRows = usagetest.Count(usagetest.Rows(t, pool, acct), func(r usagetest.Row) bool { return r.Route == "verify_list" })
	c := usagetest.Of(t, pool, acct)
	g.billable, g.held, g.holds = c.Billable, c.Held, c.Holds
	return g
}

// 1. A worker killed in the middle of a chunk (its connection gone: no ack, no progress, as a
// process killed) and the real engine probing mailsim on the live one: the chunk is redelivered,
// every unique address is verified once by the live worker, written once and billed once, the
// counters are exact, the list completes once with one callback, its hold is gone, and the dead
// worker's late write changes nothing.
func TestListWorkerKilledMidChunkBillsAndCallsBackOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 10, 2
	store := list.NewStore(pool, cfg)

	const unique = 60
	users := []string{}
	var file strings.Builder
	for i := range unique {
		fmt.Fprintf(&file, "u%d@killed.test\n", i)
		if i%2 == 0 {
			users = append(users, fmt.Sprintf("u%d", i))
		}
	}
	l, acct := importList(t, b.js, pool, store, list.Text, file.String())

	stuck := &stuckPipeline{took: make(chan struct{}, 1), release: make(chan struct{})}
	dead := runLists(t, b.url, store, stuck)
	t.Cleanup(func() {
		select {
		case <-stuck.release:
		default:
			close(stuck.release)
		}
	})
	select {
	case <-stuck.took:
	case <-time.After(10 * time.Second):
		t.Fatal("the first worker took no chunk")
	}
	dead.Close()

	live := &countingPipeline{inner: simEngine(t, users, "killed.test")}
	runLists(t, b.url, store, live)
	got := waitList(t, store, acct, l, 60*time.Second)
	check := func(when string) {
		t.Helper()
		g := readLedger(t, pool, acct, l.ID)
		if g.state != list.Completed || g.verified != unique || g.counted != unique || g.written != unique {
			t.Errorf("%s: %s, verified %d, counts %d, written %d; want completed with %d each", when, g.state, g.verified, g.counted, g.written, unique)
		}
		if g.usageRows != unique || g.billable != unique {
			t.Errorf("%s: %d usage rows, %d billable; want %d each", when, g.usageRows, g.billable, unique)
		}
		if g.held != 0 || g.holds != 0 {
			t.Errorf("%s: %d units held in %d holds after completion, want none", when, g.held, g.holds)
		}
		if g.deliveries != 1 || g.event != "list.completed" {
			t.Errorf("%s: callbacks %d (%q), want one list.completed", when, g.deliveries, g.event)
		}
	}
	if got.View("", time.Now()).Progress != 1 {
		t.Errorf("progress %v, want 1", got.View("", time.Now()).Progress)
	}
	byStatus := got.View("", time.Now()).Counts.ByStatus
	if byStatus["deliverable"] != unique/2 || byStatus["undeliverable"] != unique/2 {
		t.Errorf("counts by status %v, want %d deliverable and %d undeliverable", byStatus, unique/2, unique/2)
	}
	check("completed")
	for a, n := range live.times() {
		if n != 1 {
			t.Errorf("the live worker verified %s %d times, want once", a, n)
		}
	}
	if n := len(live.times()); n != unique {
		t.Errorf("the live worker verified %d addresses, want %d", n, unique)
	}

	close(stuck.release) // the dead worker comes back and writes its chunk: all written already
	time.Sleep(500 * time.Millisecond)
	check("after the dead worker's late write")
}

// racePipeline verifies a batch (deliverable) after a short random pause, and says when it took
// one.
type racePipeline struct {
	took  chan struct{}
	calls atomic.Int64
}

func (p *racePipeline) Verify(context.Context, string) verdict.Result { panic("not used") }

func (p *racePipeline) VerifyBatch(ctx context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	p.calls.Add(1)
	select {
	case p.took <- struct{}{}:
	default:
	}
	select {
	case <-time.After(time.Duration(rand.IntN(15)) * time.Millisecond):
	case <-ctx.Done():
	}
	return resultsOf(emails, verdict.OutcomeDeliverable)
}

// raceStop runs iterations lists, each stopped (stop: cancel or delete) at a random moment while
// its chunks are being verified and written, and checks after each that what is kept and what is
// billed are the same addresses; it returns the ledgers seen, for the caller's own checks.
func raceStop(t *testing.T, iterations int, stop func(store *list.Store, acct string, id uuid.UUID) error,
	check func(t *testing.T, i int, g ledger, billedBefore int)) {
	b := setup(t)
	pool := pgtest.New(t)
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 4, 3
	store := list.NewStore(pool, cfg)
	p := &racePipeline{took: make(chan struct{}, 1)}
	runLists(t, b.url, store, p, func(r *verifyworker.ListRunner) {
		r.Concurrency, r.WatchEvery = 3, 5*time.Millisecond
	})
	for i := range iterations {
		var file strings.Builder
		for n := range 12 {
			fmt.Fprintf(&file, "u%d@race%d.test\n", n, i)
		}
		select {
		case <-p.took:
		default:
		}
		l, acct := importList(t, b.js, pool, store, list.Text, file.String())
		select {
		case <-p.took:
		case <-time.After(10 * time.Second):
			t.Fatal("no chunk taken")
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		err := stop(store, acct, l.ID)
		if err != nil && err != list.ErrFinished {
			t.Fatalf("iteration %d: %v", i, err)
		}
		before := readLedger(t, pool, acct, l.ID).usageRows
		verifyworker.ConsumerSettled(t, b.js, queue.StreamLists, queue.ConsumerListChunks, 30*time.Second)
		time.Sleep(30 * time.Millisecond) // a write that lost the race would land now
		check(t, i, readLedger(t, pool, acct, l.ID), before)
	}
}

// 2. Cancel racing the chunks' writes, many times: a chunk is either written and billed (its
// write came first) or neither (the cancel came first), never one without the other; the counts
// add up to what is written, the hold is released, and a canceled list gets no callback.
func TestListCancelRacingChunksKeepsWhatItBills(t *testing.T) {
	t.Parallel()
	var canceled, completed, partial int
	answered := -1 // the verified count of the cancel's answer, -1 for a 409
	raceStop(t, 30, func(store *list.Store, acct string, id uuid.UUID) error {
		l, _, err := store.Cancel(context.Background(), acct, id)
		answered = -1
		if err == nil {
			answered = l.Verified
		}
		return err
	}, func(t *testing.T, i int, g ledger, billedAtCancel int) {
		if answered >= 0 && answered != g.written {
			t.Errorf("iteration %d: the cancel answered %d verified, %d are kept", i, answered, g.written)
		}
		if g.verified != g.written || g.counted != g.written || g.usageRows != g.written || g.billable != g.written {
			t.Errorf("iteration %d (%s): verified %d, counts %d, written %d, usage rows %d, billable %d: want all equal",
				i, g.state, g.verified, g.counted, g.written, g.usageRows, g.billable)
		}
		if g.usageRows != billedAtCancel {
			t.Errorf("iteration %d: %d usage rows when the cancel returned, %d later: billed after the cancel", i, billedAtCancel, g.usageRows)
		}
		if g.held != 0 || g.holds != 0 {
			t.Errorf("iteration %d (%s): %d units held in %d holds, want the hold released", i, g.state, g.held, g.holds)
		}
		switch g.state {
		case list.Canceled:
			canceled++
			if g.written > 0 && g.written < 12 {
				partial++
			}
			if g.deliveries != 0 {
				t.Errorf("iteration %d: %d callbacks for a canceled list, want none", i, g.deliveries)
			}
		case list.Completed:
			completed++
			if g.written != 12 || g.deliveries != 1 {
				t.Errorf("iteration %d: completed with %d written and %d callbacks", i, g.written, g.deliveries)
			}
		default:
			t.Errorf("iteration %d: state %s after a cancel", i, g.state)
		}
	})
	t.Logf("canceled %d (with some chunks written: %d), completed first %d", canceled, partial, completed)
}

// 3. Delete racing the chunks, many times: once the delete has returned nothing of the list is
// left or comes back (a late write finds no list), nothing more is billed, the hold is released,
// and the list has no callback.
func TestListDeleteRacingChunksLeavesNothing(t *testing.T) {
	t.Parallel()
	raceStop(t, 30, func(store *list.Store, acct string, id uuid.UUID) error {
		_, err := store.Delete(context.Background(), acct, id)
		return err
	}, func(t *testing.T, i int, g ledger, billedAtDelete int) {
		if g.stored != 0 {
			t.Errorf("iteration %d: %d rows of the deleted list in Postgres, want none", i, g.stored)
		}
		if g.deliveries != 0 {
			t.Errorf("iteration %d: %d callbacks of a deleted list, want none", i, g.deliveries)
		}
		if g.usageRows != billedAtDelete || g.billable != g.usageRows {
			t.Errorf("iteration %d: %d usage rows at the delete, %d later, %d billable", i, billedAtDelete, g.usageRows, g.billable)
		}
		if g.held != 0 || g.holds != 0 {
			t.Errorf("iteration %d: %d units held in %d holds, want the hold released", i, g.held, g.holds)
		}
	})
}

// 4. One address written in several forms (case, surrounding blanks, tabs and no-break spaces,
// in a CSV cell and quoted): verified once by the real engine, billed once, and every row of the download has its
// result, with its own cell as uploaded.
func TestListDuplicateFormsVerifiedAndBilledOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	store := list.NewStore(pool, list.Defaults())
	file := "name,Email\n" +
		"a,Ann@Dup.test\n" +
		"b,  ann@dup.test  \n" +
		"c,\"\tANN@DUP.TEST \"\n" +
		"d,bob@dup.test\n" +
		"e,BOB@dup.TEST\n" +
		"f,zed@dup.test\n" +
		"g,\u00a0ann@dup.test\u00a0\n" // no-break spaces, as spreadsheets paste them
	l, acct := importList(t, b.js, pool, store, list.CSV, file)
	if l.Rows != 7 || l.Unique != 3 {
		t.Fatalf("%d rows, %d unique; want 7 and 3", l.Rows, l.Unique)
	}
	p := &countingPipeline{inner: simEngine(t, []string{"ann", "bob"}, "dup.test")}
	runLists(t, b.url, store, p)
	got := waitList(t, store, acct, l, 30*time.Second)
	if got.State != list.Completed || got.Verified != 3 {
		t.Fatalf("list %s with %d verified, want completed with 3", got.State, got.Verified)
	}
	if want := map[string]int{"ann@dup.test": 1, "bob@dup.test": 1, "zed@dup.test": 1}; !equalCounts(p.times(), want) {
		t.Errorf("verified %v, want %v", p.times(), want)
	}
	g := readLedger(t, pool, acct, l.ID)
	if g.usageRows != 3 || g.billable != 3 || g.held != 0 {
		t.Errorf("%d usage rows, %d billable, %d held; want 3, 3, 0", g.usageRows, g.billable, g.held)
	}
	var out bytes.Buffer
	pgtest.Must(t, store.Export(context.Background(), got, list.CSV, nil, list.RawFormulas, &out, func() {}), "export")
	recs, err := csv.NewReader(&out).ReadAll()
	pgtest.Must(t, err, "read the download")
	if len(recs) != 8 {
		t.Fatalf("%d lines in the download, want the header and 7 rows:\n%s", len(recs), out.String())
	}
	want := [][2]string{{"Ann@Dup.test", "deliverable"}, {"  ann@dup.test  ", "deliverable"}, {"\tANN@DUP.TEST ", "deliverable"},
		{"bob@dup.test", "deliverable"}, {"BOB@dup.TEST", "deliverable"}, {"zed@dup.test", "undeliverable"},
		{"\u00a0ann@dup.test\u00a0", "deliverable"}}
	for i, w := range want {
		if r := recs[i+1]; r[1] != w[0] || r[2] != w[1] {
			t.Errorf("row %d: cell %q status %q, want %q %q", i+1, r[1], r[2], w[0], w[1])
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// poisonPipeline panics on poison, alone or in any batch that holds it, and verifies the others
// (deliverable).
type poisonPipeline struct {
	poison string
	hits   atomic.Int64
}

func (p *poisonPipeline) Verify(_ context.Context, email string) verdict.Result {
	if email == p.poison {
		p.hits.Add(1)
		panic("the engine cannot handle " + p.poison)
	}
	return resultsOf([]string{email}, verdict.OutcomeDeliverable)[0]
}

func (p *poisonPipeline) VerifyBatch(_ context.Context, emails []string, _ func(int, verdict.Result)) []verdict.Result {
	if slices.Contains(emails, p.poison) {
		p.hits.Add(1)
		panic("the engine cannot handle " + p.poison)
	}
	return resultsOf(emails, verdict.OutcomeDeliverable)
}

// 5. An address whose verification panics: its chunk fails MaxFailures times and no more (it is
// not redelivered forever), the list ends failed saying which chunk, its hold is released, what
// the other chunks wrote is kept and billed, and there is one list.failed callback. The chunk's
// failures are counted in mailvet_list_chunk_failures_total: tried again, then failing the list.
func TestListPoisonChunkFailsTheListOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := pgtest.New(t)
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 5, 1
	store := list.NewStore(pool, cfg)
	var file strings.Builder
	for n := range 15 {
		fmt.Fprintf(&file, "u%02d@poison.test\n", n)
	}
	l, acct := importList(t, b.js, pool, store, list.Text, file.String())
	const maxFailures = 3
	p := &poisonPipeline{poison: "u07@poison.test"} // chunk 1
	reg := prometheus.NewRegistry()
	runLists(t, b.url, store, p, func(r *verifyworker.ListRunner) {
		r.MaxFailures, r.OutageRetry = maxFailures, 20*time.Millisecond
		verifyworker.CountChunkFailures(r, reg)
	})
	got := waitList(t, store, acct, l, 30*time.Second)
	if got.State != list.Failed || !strings.Contains(errorOf(got), "chunk 1 could not be verified") || strings.Contains(errorOf(got), "cannot handle") {
		t.Fatalf("list %s (error %q), want failed naming chunk 1 and not the panic's text", got.State, errorOf(got))
	}
	verifyworker.ConsumerSettled(t, b.js, queue.StreamLists, queue.ConsumerListChunks, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := p.hits.Load(); n != maxFailures {
		t.Errorf("the poison chunk was tried %d times, want %d", n, maxFailures)
	}
	g := readLedger(t, pool, acct, l.ID)
	if g.written != 5 || g.verified != 5 || g.counted != 5 || g.usageRows != 5 || g.billable != 5 {
		t.Errorf("written %d, verified %d, counts %d, usage rows %d, billable %d; want chunk 0's 5 each",
			g.written, g.verified, g.counted, g.usageRows, g.billable)
	}
	if g.held != 0 || g.holds != 0 {
		t.Errorf("%d units held in %d holds after the failure, want the hold released", g.held, g.holds)
	}
	if g.deliveries != 1 || g.event != "list.failed" {
		t.Errorf("callbacks %d (%q), want one list.failed", g.deliveries, g.event)
	}
	for outcome, want := range map[string]float64{"retry": maxFailures - 1, "failed": 1, "outage": 0} {
		if got := chunkFailureCount(t, reg, outcome); got != want {
			t.Errorf("mailvet_list_chunk_failures_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

// chunkFailureCount reads mailvet_list_chunk_failures_total{outcome} from reg.
func chunkFailureCount(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "mailvet_list_chunk_failures_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "outcome" && l[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("mailvet_list_chunk_failures_total{outcome=%q} not gathered", outcome)
	return 0
}
