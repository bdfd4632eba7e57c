package verifyworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// scriptedPipeline stands in for the engine (which has its own tests against a mail world):
// each address is "deliverable" after hold(address) returns. The broker under test is real.
type scriptedPipeline struct {
	hold  func(ctx context.Context, email string)
	calls atomic.Int64
}

func (p *scriptedPipeline) Verify(ctx context.Context, email string) verdict.Result {
	p.calls.Add(1)
	if p.hold != nil {
		p.hold(ctx, email)
	}
	r := verdict.Result{Email: email}
	r.Apply(verdict.OutcomeDeliverable)
	return r
}

func (p *scriptedPipeline) VerifyBatch(ctx context.Context, emails []string, each func(int, verdict.Result)) []verdict.Result {
	out := make([]verdict.Result, len(emails))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, e := range emails {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := p.Verify(ctx, e)
			mu.Lock()
			defer mu.Unlock()
			out[i] = r
			if each != nil {
				each(i, r)
			}
		}()
	}
	wg.Wait()
	return out
}

type bundle struct {
	url        string
	nc         *nats.Conn
	js         jetstream.JetStream
	dispatcher *queue.Dispatcher
}

func setup(t *testing.T) *bundle {
	t.Helper()
	s := natstest.Server(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	return &bundle{url: s.ClientURL(), nc: nc, js: js, dispatcher: queue.NewDispatcher(nc, js, queue.Layout{})}
}

// startWorker runs a worker on its own connection (a separate process, as far as NATS can tell)
// and returns its connection so a test can kill it.
func (b *bundle) startWorker(t *testing.T, p verifyworker.Pipeline, opts verifyworker.Options) (*nats.Conn, context.CancelFunc) {
	t.Helper()
	nc, err := nats.Connect(b.url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	w := verifyworker.New(nc, js, p, app.NewLogger(io.Discard, "test"), nil, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		nc.Close()
	})
	// Wait until the worker's subscription is visible to the server. Running out of time is not a
	// failure here: a test whose worker does not answer the warm-up finds out through its own checks.
	wait.Until(5*time.Second, func() bool {
		_, err := b.nc.Request(queue.SubjectVerifySync, []byte(`{"email":"warmup@example.com"}`), time.Second)
		return err == nil
	})
	return nc, cancel
}

func TestVerifyOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := b.dispatcher.VerifyOne(ctx, "ann@example.com")
	if err != nil || r.Email != "ann@example.com" || r.Status != verdict.StatusDeliverable {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestVerifyOneWithoutWorkersFailsFast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := b.dispatcher.VerifyOne(ctx, "ann@example.com")
	if !errors.Is(err, queue.ErrNoWorkers) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

// A single verification whose worker is killed mid-request is answered by another worker within
// about WorkerSilence of the kill, not at its 10 s deadline; while the worker lives it says it is
// at work, so a verification slower than WorkerSilence is not sent a second time.
func TestSyncVerifyOutlivesAKilledWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const email = "held@example.com"
	taken := make(chan struct{}, 1)
	stuck := make(chan struct{})
	defer close(stuck)
	doomedConn, _ := b.startWorker(t, &scriptedPipeline{hold: func(_ context.Context, e string) {
		if e == email {
			taken <- struct{}{}
			<-stuck // never answers: the process is about to die
		}
	}}, verifyworker.Options{})
	var asked atomic.Int64
	healthy := &scriptedPipeline{hold: func(_ context.Context, e string) {
		if e == email {
			asked.Add(1)
		}
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the API's deadline
	defer cancel()
	type outcome struct {
		r   verdict.Result
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		r, err := b.dispatcher.VerifyOne(ctx, email)
		got <- outcome{r, err}
	}()
	select {
	case <-taken:
	case <-time.After(5 * time.Second):
		t.Fatal("the doomed worker never took the request")
	}
	b.startWorker(t, healthy, verifyworker.Options{})
	// Longer than WorkerSilence: the doomed worker's heartbeats keep its request from being
	// sent again while it lives.
	time.Sleep(b.dispatcher.WorkerSilence + time.Second)
	if n := asked.Load(); n != 0 {
		t.Fatalf("a request whose worker is alive and at work was sent again (%d times)", n)
	}
	killed := time.Now()
	doomedConn.Close() // kill -9, as far as NATS can tell: no answer, no more heartbeats
	o := <-got
	took := time.Since(killed)
	if o.err != nil || o.r.Email != email || o.r.Status != verdict.StatusDeliverable {
		t.Fatalf("after the kill: %+v, %v", o.r, o.err)
	}
	if limit := b.dispatcher.WorkerSilence + 2*time.Second; took > limit {
		t.Fatalf("answered %v after the kill, want within %v", took, limit)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the healthy worker verified it %d times, want 1", n)
	}
	if n := b.dispatcher.SilentWorkerReasks(); n != 1 {
		t.Fatalf("%d re-asks counted, want 1", n)
	}
	t.Logf("answered by another worker %v after the kill", took.Round(time.Millisecond))
}

// Many single verifications at once, over two workers, each get the answer for their own address
// (one reply subscription serves them all).
func TestConcurrentSyncVerificationsGetTheirOwnAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow := func(_ context.Context, e string) { time.Sleep(time.Duration(len(e)%7) * time.Millisecond) }
	b.startWorker(t, &scriptedPipeline{hold: slow}, verifyworker.Options{Concurrency: 256})
	b.startWorker(t, &scriptedPipeline{hold: slow}, verifyworker.Options{Concurrency: 256})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 400
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			email := fmt.Sprintf("user%d@example.com", i)
			r, err := b.dispatcher.VerifyOne(ctx, email)
			if err == nil && r.Email != email {
				err = fmt.Errorf("asked for %s, answered for %s", email, r.Email)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := b.dispatcher.SilentWorkerReasks(); n != 0 {
		t.Fatalf("%d verifications re-asked with every worker alive", n)
	}
}

// A request taken by a worker that never says anything — frozen before its first heartbeat, or an
// older worker that sends none — is sent to another worker after WorkerSilence.
func TestSyncVerifyAsksAgainWhenItsWorkerIsSilent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	silentConn, err := nats.Connect(b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer silentConn.Close()
	seen := make(chan struct{}, 4)
	silent, err := silentConn.QueueSubscribe(queue.SubjectVerifySync, queue.QueueVerifiers, func(*nats.Msg) { seen <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	if err := silentConn.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		r, err := b.dispatcher.VerifyOne(ctx, "quiet@example.com")
		if err == nil && r.Status != verdict.StatusDeliverable {
			err = fmt.Errorf("status %s", r.Status)
		}
		got <- err
	}()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("the silent worker never got the request")
	}
	// The silent one leaves the group (its process is gone for the fleet, its request with it)
	// and a healthy worker joins before the dispatcher's patience runs out.
	if err := silent.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	_ = silentConn.Flush()
	b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{})
	if err := <-got; err != nil {
		t.Fatalf("VerifyOne: %v", err)
	}
	took := time.Since(start)
	if took < b.dispatcher.WorkerSilence || took > b.dispatcher.WorkerSilence+3*time.Second {
		t.Fatalf("answered after %v, want about WorkerSilence (%v)", took, b.dispatcher.WorkerSilence)
	}
}

// A request sent again because its worker went silent, whose second ask is refused ("busy", or "no
// responders"), still takes the first worker's answer when it comes: that worker was alive, only
// slow and silent (an older worker without heartbeats, during a rolling upgrade). Found in review:
// the refusal ended the request with a 503 a second before the answer.
func TestRefusedReaskStillTakesTheFirstWorkersAnswer(t *testing.T) {
	t.Parallel()
	for _, other := range []string{"busy worker", "no other worker"} {
		t.Run(other, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			oldConn, err := nats.Connect(b.url) // an older worker: answers, sends no heartbeats
			if err != nil {
				t.Fatal(err)
			}
			defer oldConn.Close()
			took := make(chan struct{}, 4)
			var oldSub *nats.Subscription
			oldSub, err = oldConn.QueueSubscribe(queue.SubjectVerifySync, queue.QueueVerifiers, func(m *nats.Msg) {
				took <- struct{}{}
				go func() {
					var req queue.VerifyRequest
					_ = json.Unmarshal(m.Data, &req)
					time.Sleep(b.dispatcher.WorkerSilence + time.Second) // a slow SMTP probe
					r := verdict.Result{Email: req.Email}
					r.Apply(verdict.OutcomeDeliverable)
					body, _ := json.Marshal(queue.VerifyReply{Result: &r})
					_ = m.Respond(body)
				}()
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = oldConn.Flush()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				_, err := b.dispatcher.VerifyOne(ctx, "slow@example.com")
				got <- err
			}()
			<-took
			// Rolling upgrade: the old worker drains (leaves the group, finishes what it has).
			_ = oldSub.Unsubscribe()
			_ = oldConn.Flush()
			if other == "busy worker" {
				busyConn, _ := nats.Connect(b.url)
				defer busyConn.Close()
				_, _ = busyConn.QueueSubscribe(queue.SubjectVerifySync, queue.QueueVerifiers, func(m *nats.Msg) {
					body, _ := json.Marshal(queue.VerifyReply{Error: queue.ReplyBusy})
					_ = m.Respond(body)
				})
				_ = busyConn.Flush()
			}
			if err := <-got; err != nil {
				t.Fatalf("VerifyOne: %v; the first worker answered a second later", err)
			}
			if n := b.dispatcher.SilentWorkerReasks(); n < 1 {
				t.Fatalf("the request was not sent again (%d re-asks): the test did not test the refusal", n)
			}
		})
	}
}

// A saturated worker refuses at once ("busy") instead of queueing the caller.
func TestSaturatedWorkerSaysBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var holding atomic.Bool
	p := &scriptedPipeline{hold: func(ctx context.Context, email string) {
		if email == "slow@example.com" {
			holding.Store(true)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}}
	b.startWorker(t, p, verifyworker.Options{Concurrency: 1})
	defer close(release)
	// The slow request takes the worker's one slot; sent again until it does, since on a loaded
	// machine the worker's subscription may still be on its way to the server.
	go func() {
		for deadline := time.Now().Add(10 * time.Second); !holding.Load() && time.Now().Before(deadline); {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = b.dispatcher.VerifyOne(ctx, "slow@example.com")
			cancel()
			if !holding.Load() {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	wait.For(t, 10*time.Second, "the slow request to reach the worker", holding.Load)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.dispatcher.VerifyOne(ctx, "next@example.com"); !errors.Is(err, queue.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

func TestVerifyManyAnswersEveryItemOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{Concurrency: 32})
	b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{Concurrency: 32})
	emails := make([]string, 500)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%d@example.com", i)
	}
	seen := make([]int, len(emails))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	missing, err := b.dispatcher.VerifyMany(ctx, emails, func(i int, r verdict.Result) {
		seen[i]++
		if r.Email != emails[i] {
			t.Errorf("item %d answered for %s", i, r.Email)
		}
	})
	if err != nil || len(missing) != 0 {
		t.Fatalf("err %v missing %v", err, missing)
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("item %d reported %d times", i, n)
		}
	}
}

// A worker that dies mid-batch loses nothing: its unacked items go to another worker.
func TestWorkerKilledMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var taken atomic.Int64
	stuck := make(chan struct{})
	doomed := &scriptedPipeline{hold: func(ctx context.Context, email string) {
		if email != "warmup@example.com" {
			taken.Add(1)
			<-stuck // never answers: the process is about to die
		}
	}}
	doomedConn, _ := b.startWorker(t, doomed, verifyworker.Options{Concurrency: 64, ItemAckWait: time.Second})
	defer close(stuck)

	emails := make([]string, 100)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%d@example.com", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type outcome struct {
		missing []int
		err     error
	}
	got := make(chan outcome, 1)
	var answered atomic.Int64
	go func() {
		m, err := b.dispatcher.VerifyMany(ctx, emails, func(int, verdict.Result) { answered.Add(1) })
		got <- outcome{m, err}
	}()
	wait.For(t, 20*time.Second, "the doomed worker to take an item", func() bool { return taken.Load() > 0 })
	doomedConn.Close() // kill -9, as far as NATS can tell: no acks, no goodbyes

	b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{Concurrency: 64})
	o := <-got
	if o.err != nil || len(o.missing) != 0 || answered.Load() != int64(len(emails)) {
		t.Fatalf("err %v missing %d answered %d", o.err, len(o.missing), answered.Load())
	}
}

// Items whose caller has given up are dropped, not verified.
func TestExpiredItemsAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := b.dispatcher.VerifyMany(ctx, []string{"a@example.com", "b@example.com"}, nil)
	if !errors.Is(err, queue.ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	time.Sleep(250 * time.Millisecond)
	p := &scriptedPipeline{}
	b.startWorker(t, p, verifyworker.Options{})
	time.Sleep(500 * time.Millisecond)
	if n := p.calls.Load(); n > 1 { // only the warm-up request
		t.Fatalf("verified %d expired items", n-1)
	}
}

// A running worker is seen; once it is gone (its connection closed), the dispatcher still takes
// it to be there for WorkersGone, then no longer. The dispatcher's clock is moved by hand, so the
// test does not wait out WorkersGone.
func TestWorkersAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := testclock.New(time.Now())
	b.dispatcher.Now = clock.Now
	ctx := context.Background()
	if b.dispatcher.WorkersAlive(ctx) {
		t.Fatal("alive with no worker")
	}
	conn, _ := b.startWorker(t, &scriptedPipeline{}, verifyworker.Options{})
	wait.For(t, 5*time.Second, "a running worker to be seen", func() bool { return b.dispatcher.WorkersAlive(ctx) })
	conn.Close()
	if !b.dispatcher.WorkersAlive(ctx) {
		t.Fatal("a worker seen a moment ago is taken for gone before WorkersGone")
	}
	// JetStream drops the closed connection's pull requests in a moment; until it has, every look
	// sees the worker again. Each look here comes WorkersGone after the one before.
	wait.For(t, 20*time.Second, "a dead worker to be taken for gone", func() bool {
		clock.Add(b.dispatcher.WorkersGone + time.Millisecond)
		return !b.dispatcher.WorkersAlive(ctx)
	})
}

// A worker told to stop while it is still starting stops cleanly: no error, nothing left running.
func TestStopWhileStarting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, run := range verifyworker.Services(verifyworker.Deps{NATS: b.nc, JS: b.js, Pipe: &scriptedPipeline{}, Log: app.NewLogger(io.Discard, "test")}) {
		if err := run(ctx); err != nil {
			t.Errorf("run with a cancelled context: %v", err)
		}
	}
}

// An address the engine panics on ends its own request, not the worker (the test binary would
// die with it) nor, redelivered, every worker after it: a single verification is refused as
// busy, batch items not answered are taken off the stream, and the worker goes on answering.
func TestPanicOnOneAddressSparesTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const poison = "poison@example.com"
	b.startWorker(t, &poisonPipeline{poison: poison}, verifyworker.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.dispatcher.VerifyOne(ctx, poison); !errors.Is(err, queue.ErrBusy) {
		t.Fatalf("single verification of the poison address: %v, want %v", err, queue.ErrBusy)
	}
	if r, err := b.dispatcher.VerifyOne(ctx, "ann@example.com"); err != nil || r.Status != verdict.StatusDeliverable {
		t.Fatalf("after the panic: %+v %v, want the worker still answering", r, err)
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer bcancel()
	got := map[int]bool{}
	var mu sync.Mutex
	missing, _ := b.dispatcher.VerifyMany(bctx, []string{"bob@example.com", poison}, func(i int, _ verdict.Result) {
		mu.Lock()
		got[i] = true
		mu.Unlock()
	})
	if len(missing) == 0 || missing[len(missing)-1] != 1 || got[1] {
		t.Fatalf("batch with the poison address: answered %v, missing %v; want the poison one (1) missing", got, missing)
	}
	if r, err := b.dispatcher.VerifyOne(ctx, "zoe@example.com"); err != nil || r.Status != verdict.StatusDeliverable {
		t.Fatalf("after the batch's panic: %+v %v, want the worker still answering", r, err)
	}
}
