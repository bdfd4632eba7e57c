package webhook

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A worker stopped while a delivery waits out its backoff leaves nothing behind but the
// JetStream message; a new worker resumes the schedule and the delivery ends after exactly three
// attempts, none repeated and none lost.
func TestWorkerStoppedDuringBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(500, 502, 200))
	first := b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	id := b.create(t, b.accountID, rc.url("/cb"), "whsec_12345678", sampleBody, true)
	wait.For(t, 10*time.Second, "attempt 1 recorded", func() bool {
		as := b.attempts(t, id)
		return len(as) == 1 && as[0].status != nil
	})
	first.stop()
	if r := b.row(t, id); r.state != StateRetrying || r.attempts != 1 {
		t.Fatalf("after the stop: %+v, want retrying after 1 attempt", r)
	}

	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	r := b.waitFinal(t, id, 20*time.Second)
	if r.state != StateDelivered || r.attempts != 3 {
		t.Fatalf("delivery %s after %d attempts, want delivered after 3", r.state, r.attempts)
	}
	if n := rc.count.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
}

// A worker that dies in the middle of an attempt (its in-flight request is abandoned and nothing
// is acked, as in a crash) leaves that attempt counted, logged as interrupted. After AckWait the
// message comes back to a new worker, which makes the third and last attempt.
func TestWorkerCrashMidAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived2 := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			w.WriteHeader(500)
		case 2:
			close(arrived2)
			<-r.Context().Done() // hang until the client goes away
		default:
			w.WriteHeader(200)
		}
	})
	// Short timeouts keep the test quick; AckWait must exceed the attempt lease (timeout + 2 s).
	o := Options{AttemptTimeout: time.Second, AckWait: 4 * time.Second, DrainTimeout: time.Millisecond,
		Client: ClientOptions{AllowPrivate: true}}
	first := b.startWorker(t, o)
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	select {
	case <-arrived2:
	case <-time.After(15 * time.Second):
		t.Fatal("attempt 2 never arrived")
	}
	first.stop() // DrainTimeout 1 ms: the in-flight attempt is abandoned like a crash

	if r := b.row(t, id); r.state != StateRetrying || r.attempts != 2 {
		t.Fatalf("after the crash: %+v, want retrying with attempt 2 claimed", r)
	}
	b.startWorker(t, o)
	r := b.waitFinal(t, id, 20*time.Second)
	if r.state != StateDelivered || r.attempts != 3 {
		t.Fatalf("delivery %s after %d attempts, want delivered after 3", r.state, r.attempts)
	}
	as := b.attempts(t, id)
	if len(as) != 3 || as[1].err == nil || !strings.HasPrefix(*as[1].err, "interrupted") || itoa(as[2].status) != "200" {
		t.Errorf("attempt log %+v: want 500, interrupted, 200", as)
	}
	if n := rc.count.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
}

// When the verifier dies between its commit and its publish, the delivery exists only in
// Postgres; the sweep publishes it once it is older than SweepAge, and only then.
func TestSweepRepublishesUnpublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := newReceiver(t, statuses(200))
	old := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, false)
	young := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, false)
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET created_at = now() - interval '31 seconds', updated_at = now() - interval '31 seconds' WHERE id = $1`, old)

	n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 (only the old delivery)", n, err)
	}
	// A second replica sweeping right after finds nothing: the row was bumped.
	if n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	if r := b.waitFinal(t, old, 15*time.Second); r.state != StateDelivered || r.attempts != 1 {
		t.Fatalf("swept delivery %+v, want delivered once", r)
	}
	time.Sleep(200 * time.Millisecond)
	if r := b.row(t, young); r.state != StatePending {
		t.Errorf("young unpublished delivery is %s; the sweep must leave it alone", r.state)
	}

	// The worker's own sweeper does the same on its timer.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET updated_at = now() - interval '31 seconds' WHERE id = $1`, young)
	sweeper, err := NewWorker(b.pool, b.js, Options{SweepInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go sweeper.RunSweeper(sctx)
	if r := b.waitFinal(t, young, 15*time.Second); r.state != StateDelivered {
		t.Fatalf("delivery swept by RunSweeper: %+v", r)
	}
	if n := rc.count.Load(); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
}

// The same delivery published twice (verifier retry plus sweep) is deduplicated by message id,
// and even a duplicate that gets through is delivered once.
func TestDoublePublishDeliversOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(200))
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	if err := Publish(context.Background(), b.js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	b.waitFinal(t, id, 15*time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := rc.count.Load(); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
	info, err := b.js.Stream(context.Background(), "WEBHOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.LastSeq != 1 {
		t.Errorf("stream stored %d messages, want 1 (duplicate dropped)", st.LastSeq)
	}
}

// A delivery waiting out its backoff whose message is lost stays retrying until the sweep, once
// its next attempt is overdue by more than SweepAge, publishes it again; the next worker then
// delivers it. The message is lost here by purging the stream, which keeps the duplicate window:
// a re-publish under the lost message's id would be dropped, so the sweep must use an id of its
// own. A retrying delivery overdue by less is left alone, and one whose last attempt was
// interrupted and whose message was lost with it ends failed instead of retrying forever.
func TestSweepRequeuesRetryingWithLostMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := newReceiver(t, statuses(500, 200))
	o := Options{Client: ClientOptions{AllowPrivate: true}}
	first := b.startWorker(t, o)
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	wait.For(t, 10*time.Second, "attempt 1 recorded", func() bool {
		as := b.attempts(t, id)
		return len(as) == 1 && as[0].status != nil
	})
	first.stop()
	stream, err := b.js.Stream(ctx, queue.StreamWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET next_attempt_at = now() - interval '31 seconds', updated_at = now() - interval '31 seconds' WHERE id = $1`, id)

	young := b.create(t, b.accountID, rc.url("/young"), "", sampleBody, false)
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'retrying', attempts = 1, next_attempt_at = now() - interval '5 seconds', updated_at = now() - interval '31 seconds' WHERE id = $1`, young)
	exhausted := b.create(t, b.accountID, rc.url("/exhausted"), "", sampleBody, false)
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'retrying', attempts = 3, next_attempt_at = now() - interval '31 seconds', updated_at = now() - interval '31 seconds' WHERE id = $1`, exhausted)

	n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100)
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2 (the overdue retrying deliveries)", n, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after the sweep, want 2 (none dropped as a duplicate)", info.State.Msgs)
	}
	// Swept rows wait SweepAge before the next sweep publishes them again.
	if n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}

	b.startWorker(t, o)
	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateDelivered || r.attempts != 2 {
		t.Fatalf("swept delivery %+v, want delivered after 2 attempts", r)
	}
	if r := b.waitFinal(t, exhausted, 15*time.Second); r.state != StateFailed || r.attempts != 3 {
		t.Fatalf("swept exhausted delivery %+v, want failed after 3 attempts", r)
	}
	if r := b.row(t, young); r.state != StateRetrying || r.attempts != 1 {
		t.Errorf("retrying delivery overdue by less than SweepAge is %+v; the sweep must leave it alone", r)
	}
	for _, h := range rc.snapshot() {
		if h.header.Get("X-Mailvet-Delivery") != id.String() {
			t.Errorf("receiver got a request for delivery %s", h.header.Get("X-Mailvet-Delivery"))
		}
	}
	if n := rc.count.Load(); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
}

// When the sweep re-publishes a retrying delivery whose message was not lost after all (the
// workers were away for longer than SweepAge), two messages carry the delivery. The claim keeps
// them from causing a parallel or an extra attempt: while one attempt runs the delivery is leased,
// and the other message, handed back meanwhile, finds it delivered and is acked.
func TestSweptDuplicateIsNotAttemptedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	inFlight, maxInFlight := 0, 0
	arrived2, release := make(chan struct{}), make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		switch n {
		case 1:
			w.WriteHeader(500)
		case 2:
			close(arrived2)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(200)
		default:
			w.WriteHeader(200)
		}
	})
	// Short timeouts keep the lease (timeout + 2 s), and so the test, short.
	o := Options{AttemptTimeout: 3 * time.Second, AckWait: 6 * time.Second, Client: ClientOptions{AllowPrivate: true}}
	first := b.startWorker(t, o)
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	wait.For(t, 10*time.Second, "attempt 1 recorded", func() bool {
		as := b.attempts(t, id)
		return len(as) == 1 && as[0].status != nil
	})
	first.stop()
	// The backoff's message is still in the stream; the row says the attempt is long overdue.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET next_attempt_at = now() - interval '31 seconds', updated_at = now() - interval '31 seconds' WHERE id = $1`, id)
	if n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	stream, err := b.js.Stream(ctx, queue.StreamWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after the sweep, want 2", info.State.Msgs)
	}

	second := b.startWorker(t, o)
	select {
	case <-arrived2:
	case <-time.After(15 * time.Second):
		t.Fatal("attempt 2 never arrived")
	}
	// While attempt 2 runs, the claim the other message makes is refused with a wait, and the
	// sweep leaves the leased delivery alone.
	c, retryIn, err := second.w.claim(ctx, id)
	if err != nil || c != nil || retryIn <= 0 {
		t.Fatalf("claim during attempt 2 = %+v, %s, %v; want nothing to claim and a wait", c, retryIn, err)
	}
	if n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100); err != nil || n != 0 {
		t.Fatalf("Sweep during attempt 2 = %d, %v; want 0", n, err)
	}
	close(release)

	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateDelivered || r.attempts != 2 {
		t.Fatalf("delivery %+v, want delivered after 2 attempts", r)
	}
	// Both messages are done with (acked) only once each has been through a claim.
	wait.For(t, 20*time.Second, "both messages acked", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	if n := rc.count.Load(); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight != 1 {
		t.Errorf("%d attempts ran at once, want 1", maxInFlight)
	}
	if as := b.attempts(t, id); len(as) != 2 {
		t.Errorf("attempt log %+v, want 2 attempts", as)
	}
}

// An attempt under way is shown as such: the delivery stays pending during its first attempt
// (no attempt has finished), and the attempt's log entry reads "in progress", not the
// "interrupted" its row holds in case the worker dies. Once a worker did die and the lease ran
// out, the entry reads interrupted.
func TestAttemptUnderWayIsShownInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived := make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-r.Context().Done() // hang until the client goes away
	})
	o := Options{AttemptTimeout: time.Second, AckWait: 30 * time.Second, DrainTimeout: time.Millisecond,
		Client: ClientOptions{AllowPrivate: true}}
	w := b.startWorker(t, o)
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the attempt never arrived")
	}
	show := func() Delivery {
		t.Helper()
		page, err := ListDeliveries(context.Background(), b.pool, b.accountID, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			if d.ID == id {
				return d
			}
		}
		t.Fatalf("delivery %s not listed", id)
		return Delivery{}
	}
	d := show()
	if d.State != StatePending || d.Attempts != 1 || len(d.Log) != 1 || d.Log[0].Error == nil || *d.Log[0].Error != inProgressText {
		t.Fatalf("during the first attempt: state %s, %d attempts, log %+v; want pending, 1, in progress", d.State, d.Attempts, d.Log)
	}
	w.stop() // DrainTimeout 1 ms: the attempt is abandoned as in a crash
	wait.For(t, 10*time.Second, "the lease to end", func() bool {
		d := show()
		return len(d.Log) == 1 && d.Log[0].Error != nil && *d.Log[0].Error == interruptedError
	})
}

// A delivery whose first attempt was cut off by a crash stays pending (no attempt finished) with
// one attempt counted; if its message is lost too (a wiped NATS store), the sweep publishes it
// again under a message id of its own (its first id may still be in the stream's duplicate
// window), and it is delivered by its second attempt.
func TestSweepRepublishesAPendingDeliveryWithACutOffAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := newReceiver(t, statuses(200))
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true) // its message id is taken
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET attempts = 1, next_attempt_at = now() - interval '40 seconds',
		updated_at = now() - interval '40 seconds' WHERE id = $1`, id)
	pgtest.Exec(t, b.pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, error)
		VALUES ($1, 1, now() - interval '45 seconds', 0, $2)`, id, interruptedError)
	stream, err := b.js.Stream(ctx, queue.StreamWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil { // the message is lost
		t.Fatal(err)
	}
	if n, err := Sweep(ctx, b.pool, b.js, queue.Layout{}, 30*time.Second, 100); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateDelivered || r.attempts != 2 {
		t.Fatalf("swept delivery %+v, want delivered by attempt 2", r)
	}
}
