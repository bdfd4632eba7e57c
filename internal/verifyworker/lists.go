package verifyworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/sandbox"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/syntax"
	"github.com/mailvet/mailvet/internal/webhook"
)

// ListRunner verifies bulk-list chunks (docs/lists.md, "How a list runs"): it reads a chunk's
// unverified addresses from Postgres, verifies them together (one VerifyBatch, so addresses of
// a domain share MX look-ups, the catch-all probe and SMTP sessions), writes the results in one
// transaction and hands out the list's next chunk. A runner that dies mid-chunk leaves the
// message unacknowledged; another runner gets it after AckWait and verifies what is still
// unwritten, and the per-address writes make a second write of the same address impossible.
// A sandbox list's chunks are answered from the sandbox's table, at SandboxListRate.
type ListRunner struct {
	store *list.Store
	js    jetstream.JetStream
	pipe  Pipeline
	log   *slog.Logger
	// Lag, when set, records how long each chunk waited in its stream (docs/operations.md).
	Lag *queuelag.Recorder
	// failures, when set, counts the attempts that failed, by what followed (handle, retry).
	failures *attempts

	// Concurrency is how many chunks this runner verifies at once.
	Concurrency int
	// AckWait is how long a chunk may go without a sign of life before another runner takes it;
	// the runner reports progress every AckWait/3 while it holds the chunk (verifying, writing).
	AckWait time.Duration
	// ChunkBudget bounds the verification of one chunk. A chunk that uses it up is written with
	// what the pipeline answered by then (the addresses it could not finish are unknown/timeout).
	ChunkBudget time.Duration
	// WriteBudget bounds a chunk's database work — reading its addresses, then writing its
	// results and publishing what the write handed out — each step on its own clock, apart from
	// ChunkBudget: a chunk that used all of its verification budget still gets its results written.
	WriteBudget time.Duration
	// SweepEvery, StallAfter: running lists without progress for StallAfter have the chunks they
	// handed out published again (their messages were lost), queued lists are started, and
	// expired lists purged. The sweep never takes less than stallFloor (see stallAge).
	SweepEvery, StallAfter time.Duration
	// MaxFailures is how often one chunk may fail, for a reason that is not an outage, before its
	// list is given up as failed (docs/lists.md, "States").
	MaxFailures int
	// WatchEvery is how often a runner verifying a chunk checks that its list still runs: the
	// chunk of a list canceled or deleted meanwhile stops probing within WatchEvery, and what it
	// verified is dropped unbilled (docs/lists.md, "States").
	WatchEvery time.Duration
	// OutageRetry is how long a chunk that met an outage (Postgres unreachable, NATS unavailable)
	// waits before it is tried again. Such a try does not count toward MaxFailures.
	OutageRetry time.Duration
	// Layout is the deployment's NATS layout (names, and the replication of a stream the runner
	// has to re-create); the zero Layout is unprefixed, one replica.
	Layout queue.Layout
	// PublicURL is the base of the results URL in completion callbacks.
	PublicURL string

	once sync.Once
	cons *queue.Consumer
	// streamCreated is chunksStreamCreated; a test whose lists went quiet before its fresh
	// stream was made stands in a stream that was there before them.
	streamCreated func(context.Context) time.Time
	// republished is the creation time of the LISTS stream for which this runner's sweep has
	// published again every handed-out chunk (sweep), and republishedAll whether that was all
	// of them (at most republishLimit are); only the sweep's goroutine uses them.
	republished    time.Time
	republishedAll bool
}

// republishLimit bounds the chunks one sweep publishes into a new LISTS stream: with at most 8
// chunks handed out per running list (list.Config.Window), those of 1,250 running lists.
const republishLimit = 10000

// freshStream is how young a LISTS stream must be for the sweep to publish every handed-out chunk
// into it under its plain message id: well inside JetStream's 2-minute duplicate window, so that a
// chunk already published into the new stream is dropped as a duplicate, whichever clock is ahead
// by a few seconds.
const freshStream = 90 * time.Second

// NewListRunner returns a runner with production defaults.
func NewListRunner(store *list.Store, js jetstream.JetStream, pipe Pipeline, log *slog.Logger) *ListRunner {
	return &ListRunner{store: store, js: js, pipe: pipe, log: log, Concurrency: 8, AckWait: 30 * time.Second,
		ChunkBudget: 3 * time.Minute, WriteBudget: 30 * time.Second, SweepEvery: 10 * time.Second,
		StallAfter: 5 * time.Minute, MaxFailures: 20, WatchEvery: 5 * time.Second, OutageRetry: 5 * time.Second}
}

// stallFloor is the longest a running list can legitimately go without progress while a chunk of
// it is with a worker: a dead worker's chunk comes back after AckWait, and is then read,
// verified for up to ChunkBudget and written within WriteBudget. A sweep that took a list for
// stalled any sooner would publish chunks still being verified, and two workers would probe the
// same addresses.
func (r *ListRunner) stallFloor() time.Duration {
	return r.AckWait + r.WriteBudget + r.ChunkBudget + r.WriteBudget
}

// stallAge is how long a list goes without progress before the sweep takes its chunks for lost:
// StallAfter, but never less than stallFloor, whatever the two are set to.
func (r *ListRunner) stallAge() time.Duration { return max(r.StallAfter, r.stallFloor()) }

// Run consumes chunks until ctx ends, then waits for the chunks in flight: they are verified,
// written and acknowledged (a drain; docs/operations.md, "Start-up and shutdown"). Their writes
// are deliberately not cut off when ctx ends — the drain is there to write what was verified, and
// a write cancelled at shutdown would throw away minutes of probing — but each is bounded by
// WriteBudget, so a shutdown waits for a write to an unreachable Postgres no longer than that.
func (r *ListRunner) Run(ctx context.Context) error {
	return consumeConcurrently(ctx, r.consumer(), r.Concurrency, r.AckWait, r.SweepEvery, r.sweep, func(m jetstream.Msg) {
		r.Lag.Took(queuelag.ConsumerListChunks, m)
		r.handle(ctx, m)
	})
}

func (r *ListRunner) consumer() *queue.Consumer {
	r.once.Do(func() {
		r.cons = queue.NewConsumer(r.js, queue.ListChunksConsumer(r.Concurrency, r.AckWait), r.Layout, pullOne, r.log)
	})
	return r.cons
}

// Ready reports, for /readyz, whether the chunk consumer is running.
func (r *ListRunner) Ready(ctx context.Context) error { return r.consumer().Check(ctx) }

// headerChunkFailures is set on a chunk message published again after a failure that is not an
// outage: how many such failures the chunk has had so far. JetStream's own delivery count cannot
// be the limit because it counts the deliveries of an outage too, and an outage must never fail a
// list (docs/lists.md, "States"); a count that travels with the message holds across replicas and
// restarts.
const headerChunkFailures = "Mailvet-Chunk-Failures"

// outage reports whether err is a dependency being unavailable — Postgres unreachable or not
// answering in time, NATS unavailable — rather than something wrong with the chunk.
func outage(err error) bool {
	return database.Unreachable(err) || errors.Is(err, queue.ErrUnavailable)
}

// handle runs one chunk message to its ack, or leaves it for another try. An outage is tried
// again after OutageRetry and never counts; any other failure counts, and the MaxFailures-th
// fails the list. The message is terminated only once the list is recorded as failed: until then
// the chunk keeps coming back.
func (r *ListRunner) handle(stop context.Context, msg jetstream.Msg) {
	var c queue.ChunkMessage
	if err := json.Unmarshal(msg.Data(), &c); err != nil {
		r.log.Warn("bad list chunk message", "err", err)
		_ = msg.Term() // nothing can ever parse it
		return
	}
	failures := chunkFailures(msg)
	meta, _ := msg.Metadata()
	// A chunk seen before (redelivered, or published again after a failure) may have been written
	// by a worker that died before it published what the write handed out.
	again := failures > 0 || (meta != nil && meta.NumDelivered > 1)
	err := r.run(c, again)
	switch {
	case err == nil:
		_ = msg.Ack()
	case outage(err):
		r.log.Warn("list chunk: dependency unavailable; trying again", "list_id", c.ListID, "chunk", c.Chunk, "err", err)
		r.failures.add(attemptOutage)
		_ = msg.NakWithDelay(r.OutageRetry)
	case stop.Err() != nil:
		_ = msg.Nak() // stopping: not the chunk's fault, and another runner takes it now
	case failures+1 >= r.MaxFailures:
		r.log.Error("list chunk failed too often; failing its list", "list_id", c.ListID, "chunk", c.Chunk, "err", err)
		// The customer reads the list's error: it says what happened in Mailvet's words, and the
		// cause (a panic's text, a database error) stays in the operators' log line above.
		reason := fmt.Sprintf("chunk %d could not be verified after %d attempts because of an internal error; its addresses were not charged", c.Chunk, failures+1)
		if ferr := r.fail(c.ListID, reason); ferr != nil {
			r.failures.add(attemptOutage)
			_ = msg.NakWithDelay(r.OutageRetry) // comes back, and fails the list then
			return
		}
		r.failures.add(attemptFailed)
		_ = msg.Term()
	default:
		r.log.Warn("list chunk", "list_id", c.ListID, "chunk", c.Chunk, "failures", failures+1, "err", err)
		r.retry(msg, c, failures+1)
	}
}

// chunkFailures is the failure count a chunk message carries (0 for a first publish).
func chunkFailures(msg jetstream.Msg) int {
	n, err := strconv.Atoi(msg.Headers().Get(headerChunkFailures))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// retry publishes the chunk again with its failure count, then acknowledges this message. Its
// message id is per failure, so a runner that dies between the two and fails the redelivered
// message again publishes the same message, which JetStream stores once. When the publish fails
// (NATS is unavailable) the message is handed back instead, its failure uncounted.
func (r *ListRunner) retry(msg jetstream.Msg, c list.Chunk, failures int) {
	ctx, cancel := context.WithTimeout(context.Background(), r.WriteBudget)
	defer cancel()
	body, _ := json.Marshal(c)
	m := nats.NewMsg(r.Layout.Subject(queue.SubjectListChunk))
	m.Data = body
	m.Header.Set(headerChunkFailures, strconv.Itoa(failures))
	id := "list." + c.ListID.String() + "." + strconv.Itoa(c.Chunk) + ".failed." + strconv.Itoa(failures)
	if _, err := r.js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
		r.log.Warn("list chunk: publish retry", "list_id", c.ListID, "chunk", c.Chunk, "err", err)
		r.failures.add(attemptOutage)
		_ = msg.NakWithDelay(r.OutageRetry)
		return
	}
	r.failures.add(attemptRetry)
	_ = msg.Ack()
}

// run verifies and writes one chunk, then publishes what the write handed out. The ack comes
// after the publish; a runner that dies in between leaves a chunk that is redelivered (again),
// finds nothing left to verify, and publishes the list's handed-out, unwritten chunks again,
// where the other order could lose the next chunk until the sweep finds the list stalled.
//
// The verification has ChunkBudget; reading the chunk and writing it have WriteBudget each, on
// their own clocks, so a chunk whose verification used its whole budget (the prober answers what
// it could not finish unknown/timeout when its context ends) is still written, instead of failing
// its write, coming back, and failing the same way until its list fails. Progress is reported to
// JetStream for as long as the chunk is held, the write included (consumeConcurrently). A
// sandbox chunk is written no sooner than sandboxPace after it was read.
func (r *ListRunner) run(c list.Chunk, again bool) error {
	w, err := r.work(c)
	switch {
	case errors.Is(err, list.ErrNotFound):
		return nil // deleted: nothing to do
	case err != nil:
		return err
	case w.State != list.Running:
		return nil // canceled or finished
	case len(w.Addresses) == 0:
		if again {
			return r.republish(c)
		}
		return nil // written already (a copy published by the sweep)
	}
	started := time.Now()
	vctx, vcancel := context.WithTimeout(context.Background(), r.ChunkBudget)
	unwatch := every(r.WatchEvery, func() { r.watch(c, vcancel) })
	results, err := r.verify(vctx, w)
	if w.Sandbox {
		pause(vctx, time.Until(started.Add(r.sandboxPace(len(w.Addresses)))))
	}
	unwatch()
	vcancel()
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(context.Background(), r.WriteBudget)
	defer wcancel()
	out, err := r.store.Write(wctx, c, w, results, r.PublicURL)
	switch {
	case errors.Is(err, list.ErrNotFound):
		return nil // deleted while it was verified: nothing to write, nothing billed
	case err != nil:
		return err
	}
	return r.publish(wctx, out)
}

// watch stops the chunk's verification (stop) once its list is canceled, finished or deleted:
// its results would be dropped by the write anyway, so probing on would only cost the mail
// servers' patience and the fleet's sessions. A failed look-up stops nothing; the write decides.
func (r *ListRunner) watch(c list.Chunk, stop context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), min(r.WatchEvery, r.WriteBudget))
	defer cancel()
	if running, err := r.store.Running(ctx, c.ListID); err == nil && !running {
		stop()
	}
}

// work reads the chunk's unwritten addresses.
func (r *ListRunner) work(c list.Chunk) (list.Work, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.WriteBudget)
	defer cancel()
	return r.store.Work(ctx, c)
}

// republish publishes again the chunks the list has handed out and not written: a chunk found
// written on a second delivery may be one whose worker died after the write's commit and before
// its publish, so the chunks that write handed out may have no message. Chunks that do have one
// are not duplicated within the stream's duplicate window (same message ids as the first
// publish), and one verified twice is written once.
func (r *ListRunner) republish(c list.Chunk) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.WriteBudget)
	defer cancel()
	chunks, err := r.store.HandedOut(ctx, c.ListID)
	if err != nil || len(chunks) == 0 {
		return err
	}
	return queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, chunks, nil)
}

// SandboxListRate is the most addresses a second a sandbox list is answered at (docs/sandbox.md,
// "Bulk lists"). The sandbox answers without I/O, so nothing else would pace its chunks: the
// writes of one free list would take as much of Postgres as the runners can give, and every
// customer's requests would wait on it. Live lists are paced by the mail servers instead.
const SandboxListRate = 1000

// sandboxPace is the least time a sandbox chunk of n addresses takes from its read to its write.
// A list has at most Window chunks with the workers at once (list.Config), so this holds each
// list to SandboxListRate, an account to MaxRunning times that, and a runner to
// Concurrency/Window times that, whatever the number of workers, without any state shared
// between them. The chunk keeps its runner slot meanwhile, as a live chunk does while it probes
// (up to ChunkBudget), so a sandbox list takes no more of the runners' time than a live one.
func (r *ListRunner) sandboxPace(n int) time.Duration {
	return time.Duration(n) * time.Duration(r.store.Config().Window) * time.Second / SandboxListRate
}

// sandboxSyntax is the engine's syntax layer as package sandbox takes it.
func sandboxSyntax(raw string) (string, bool) {
	a, err := syntax.Parse(raw)
	return a.String(), err == nil
}

// verify runs the pipeline on the chunk's addresses, turning a panic into an error so that one
// bad chunk does not take the worker down. A sandbox list's addresses are answered by the
// sandbox instead, never probed (docs/sandbox.md).
func (r *ListRunner) verify(ctx context.Context, w list.Work) (res []verdict.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic verifying chunk: %v", p)
		}
	}()
	emails := make([]string, len(w.Addresses))
	for i, a := range w.Addresses {
		emails[i] = a.Email
	}
	if w.Sandbox {
		res = make([]verdict.Result, len(emails))
		for i, e := range emails {
			res[i] = sandbox.Verify(e, sandboxSyntax)
		}
		return res, nil
	}
	return r.pipe.VerifyBatch(ctx, emails, nil), nil
}

// publish queues what a write handed out. The chunks' publish is tried again every
// publishRetry while ctx lasts (the write's budget): NATS restarting, or the connection
// reconnecting, refuses publishes for a few seconds, and a chunk left without a message stalls
// its list until the sweep finds it, which is minutes when the list's other chunks keep it
// moving. Past ctx the error is returned, an outage: the chunk message is handed back, and its
// redelivery publishes the handed-out chunks again (republish). A delivery left unpublished is
// published by the webhook workers' outbox sweep.
func (r *ListRunner) publish(ctx context.Context, out list.Written) error {
	var err error
	if len(out.Next) > 0 {
		err = queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, out.Next, nil)
		for err != nil && pause(ctx, publishRetry) {
			r.log.Warn("publish list chunks; trying again", "err", err)
			err = queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, out.Next, nil)
		}
	}
	if out.Delivery != nil {
		if derr := webhook.Publish(ctx, r.js, r.Layout, *out.Delivery); derr != nil {
			r.log.Warn("publish list callback", "delivery_id", *out.Delivery, "err", derr)
		}
	}
	return err
}

// publishRetry is the pause between two tries of a chunk publish (publish).
const publishRetry = 500 * time.Millisecond

// pause waits d, or less when ctx ends first; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}

// fail records the list as failed and publishes what that led to; an error means it is not
// recorded, and the caller must keep the chunk.
func (r *ListRunner) fail(id uuid.UUID, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.WriteBudget)
	defer cancel()
	out, err := r.store.Fail(ctx, id, reason, r.PublicURL)
	if err != nil {
		r.log.Error("fail list", "list_id", id, "err", err)
		return err
	}
	r.publish(ctx, out)
	return nil
}

// sweep starts queued lists, re-publishes the chunks of stalled ones, and purges expired lists.
// Every replica may run it: the chunks it publishes carry the same message ids from every
// replica, and purging is idempotent.
func (r *ListRunner) sweep(ctx context.Context) {
	createdAt := r.chunksStreamCreated
	if r.streamCreated != nil {
		createdAt = r.streamCreated
	}
	created := createdAt(ctx)
	r.republishIntoFreshStream(ctx, created)
	lostBefore := created
	if !created.IsZero() && created.Equal(r.republished) && r.republishedAll {
		lostBefore = time.Time{} // every chunk handed out before it is in it now
	}
	chunks, rounds, err := r.store.Stalled(ctx, r.stallAge(), lostBefore, 100)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list sweep", "err", err)
		}
		return
	}
	if len(chunks) > 0 {
		r.log.Info("list sweep: publishing chunks of stalled or queued lists", "chunks", len(chunks))
		round := func(c queue.ChunkMessage) string { return rounds[c.ListID] }
		if err := queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, chunks, round); err != nil {
			r.log.Warn("list sweep: publish", "err", err)
		}
	}
	if n, err := r.store.Purge(ctx, time.Now(), 100); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list sweep: purge", "err", err)
		}
	} else if n > 0 {
		r.log.Info("list sweep: purged expired lists", "lists", n)
	}
}

// republishIntoFreshStream publishes, once per new LISTS stream, every chunk that running lists
// have handed out and not written, under its plain message id, while the stream is fresh.
//
// Why: a stream re-created empty (NATS lost its store) lost the messages of chunks handed out
// before; the stall rules see a list only when the whole list stops (Stalled), so a lost chunk of
// a list whose other chunks keep being written waited out stallAge. Published again within the
// duplicate window, a chunk that is already in the new stream (published after its creation, by
// a retry or by another replica's sweep) is dropped by JetStream, and only the lost ones are
// queued. A chunk that a worker was still verifying when the stream was lost is among them: it is
// verified twice and written (and billed) once. When there are more than republishLimit, the rest
// are left to the stall rule that compares the stream's creation with each list's progress.
func (r *ListRunner) republishIntoFreshStream(ctx context.Context, created time.Time) {
	if created.IsZero() || created.Equal(r.republished) || time.Since(created) > freshStream {
		return
	}
	chunks, err := r.store.HandedOutOfRunning(ctx, republishLimit)
	if err == nil && len(chunks) > 0 {
		err = queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, chunks, nil)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list sweep: publishing handed-out chunks into a new stream", "err", err)
		}
		return // the next sweep tries again, while the stream is fresh
	}
	r.republished, r.republishedAll = created, len(chunks) < republishLimit
	if len(chunks) > 0 {
		r.log.Info("list sweep: published the handed-out chunks of running lists into a new stream", "chunks", len(chunks))
	}
}

// chunksStreamCreated is when the LISTS stream was created, or the zero time when that cannot be
// told. A running list whose last progress is older has lost the messages of its handed-out
// chunks with the stream (NATS restarted without its store), and the sweep publishes them again
// at once instead of after stallAge. The clocks of Postgres and NATS are compared: a skew of a
// few seconds makes the sweep, around the moment the stream was re-created, either publish a
// chunk whose message survived (verified twice, written once) or leave it to stallAge.
func (r *ListRunner) chunksStreamCreated(ctx context.Context) time.Time {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stream, err := r.js.Stream(cctx, r.Layout.Name(queue.StreamLists)) // one stream-info request
	if err != nil {
		return time.Time{} // the next publish re-creates it; until then, nothing to compare
	}
	return stream.CachedInfo().Created
}

// every calls fn every interval until stop is called; the workers use it to tell JetStream that
// messages are still being worked on (InProgress).
func every(interval time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done) }
}
