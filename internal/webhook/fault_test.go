package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
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
	waitFor(t, 10*time.Second, "attempt 1 recorded", func() bool {
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
