package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/mailvet/mailvet/internal/verdict"
)

// Errors the API turns into 503 service_unavailable.
var (
	// ErrNoWorkers: no verifier worker is subscribed at all.
	ErrNoWorkers = errors.New("no verifier worker is running")
	// ErrBusy: the workers are saturated, or the work queue is full.
	ErrBusy = errors.New("verifier workers are saturated")
	// ErrTimeout: the workers did not answer before the deadline.
	ErrTimeout = errors.New("verifier workers did not answer in time")
	// ErrUnavailable: the connection to NATS is down and did not come back in time.
	ErrUnavailable = errors.New("the message broker is unreachable")
)

// Dispatcher hands verification work from the API to the verifier workers.
//
// Replies travel over core NATS to this replica, so a reply published while this replica's
// connection is down is lost, and so is an item in a memory stream that a restarting server
// forgets. Verification is idempotent and usage is recorded by the API per delivered item, so the
// dispatcher recovers by asking again for what is missing: after every reconnect, and when a
// list has heard nothing for StallAfter. Answers are deduplicated by index, so an item answered
// twice is delivered, and charged, once. With the connection down (dropped, or open but not
// answering: see Link), new work is refused at once and work in flight gives up after a grace
// period, with ErrUnavailable; nothing waits behind a reconnect. See docs/reliability.md.
type Dispatcher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	link   *Link
	layout Layout

	// SyncGrace is how long a single verification in flight waits for a dropped connection to
	// come back before it answers ErrUnavailable.
	SyncGrace time.Duration
	// ListGrace is the same for a batch or stream, which has more to lose by giving up.
	ListGrace time.Duration
	// StallAfter: a list that has heard no answer for this long asks again for the items still
	// missing (doubling each time), in case their answers were lost on the way.
	StallAfter time.Duration
	// PublishTimeout bounds the wait for JetStream to store an item or a job.
	PublishTimeout time.Duration
	// WorkersGone is how long workers last seen pulling are still taken to be there although
	// none pulls now (WorkersAlive).
	WorkersGone time.Duration
	// WorkerSilence is how long a single verification waits without a word from the worker that
	// took it (its heartbeats come every quarter of this) before it asks another worker: the
	// worker died, or froze, with the request (see VerifyOne).
	WorkerSilence time.Duration
	// Now is the clock ListGrace, StallAfter and WorkersGone are counted on: time.Now, unless a
	// test moves the time itself rather than wait these periods out. (A request's deadline,
	// SyncGrace and WorkerSilence follow real time: they race NATS and the workers.)
	Now func() time.Time

	replies replyMux      // the inbox of every single verification (VerifyOne)
	silent  atomic.Uint64 // single verifications sent again because their worker went silent
	// withdrawn counts the batch and stream items taken out of the stream after their caller was
	// answered without them (withdraw); unwithdrawn those left there because maxPurges purges
	// were already in flight.
	withdrawn   atomic.Uint64
	unwithdrawn atomic.Uint64
	purges      chan struct{} // a token per purge in flight (withdraw)
	purgesMu    sync.Mutex    // orders withdraw's start of a purge against Close
	purging     sync.WaitGroup
	closed      bool

	lastAlive atomic.Int64 // Unix nanoseconds when WorkersAlive last saw a worker
}

// NewDispatcher returns a dispatcher over nc in layout l. Close releases it.
func NewDispatcher(nc *nats.Conn, js jetstream.JetStream, l Layout) *Dispatcher {
	return &Dispatcher{nc: nc, js: js, link: Watch(nc), layout: l,
		SyncGrace: time.Second, ListGrace: 10 * time.Second, StallAfter: 5 * time.Second, PublishTimeout: time.Second,
		WorkersGone: 10 * time.Second, WorkerSilence: 2 * time.Second, Now: time.Now,
		purges: make(chan struct{}, maxPurges)}
}

// Close stops watching the connection and listening for single verifications' replies. It first
// waits, up to PublishTimeout, for the purges in flight (withdraw), so that at shutdown the items
// of the batches just ended are still taken out of the stream; no purge starts after it. The wait
// is bounded apart from the purges' own timeout: nats.go can hold a purge on the connection's
// lock while it dials a server that does not answer (see VerifyMany), and such a purge gives up
// on its own.
func (d *Dispatcher) Close() {
	d.purgesMu.Lock()
	d.closed = true
	d.purgesMu.Unlock()
	idle := make(chan struct{})
	go func() { d.purging.Wait(); close(idle) }()
	bound := time.NewTimer(d.PublishTimeout)
	select {
	case <-idle:
	case <-bound.C:
	}
	bound.Stop()
	d.link.Close()
	d.replies.close()
}

// Up reports whether the connection to NATS is established; work that needs the fleet is
// refused at once while it is not.
func (d *Dispatcher) Up() bool { return d.link.Up() }

// VerifyMany publishes one durable JetStream item per address and calls each as results arrive
// on this replica's inbox, in completion order. Items survive a worker crash (they are
// redelivered); answers lost with a dropped connection, a killed NATS node or a forgotten memory
// stream are asked for again (see Dispatcher). Each index is reported at most once. It returns
// when every item has answered, or with the indexes still missing and ErrTimeout when ctx ends
// first, or ErrUnavailable when the connection stays down longer than ListGrace. Items still
// missing when it returns are taken out of the stream just after (withdraw), so that no worker
// probes an address whose caller has already been answered.
func (d *Dispatcher) VerifyMany(ctx context.Context, emails []string, each func(i int, r verdict.Result)) (missing []int, err error) {
	all := func() []int {
		idx := make([]int, len(emails))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	if !d.link.Up() {
		return all(), ErrUnavailable
	}
	inbox := d.nc.NewRespInbox()
	// Re-asked items may be answered twice; the buffer leaves room for that, and the loop below
	// drains it continuously.
	replies := make(chan *nats.Msg, 2*len(emails)+16)
	sub, err := d.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return all(), fmt.Errorf("%w: %v", ErrBusy, err)
	}
	// Not waited for: while nats.go dials a server that accepts but does not answer (frozen), it
	// holds the connection's lock for up to its connect timeout, and the list must end at
	// ListGrace. Replies that arrive meanwhile find the buffer, or are dropped as a slow consumer's.
	defer func() { go func() { _ = sub.Unsubscribe() }() }()

	l := &list{d: d, emails: emails, inbox: inbox, batch: nuid.Next(), done: make([]bool, len(emails))}
	if dl, ok := ctx.Deadline(); ok {
		l.deadline = strconv.FormatInt(dl.UnixMilli(), 10)
	}
	defer func() {
		if len(missing) > 0 {
			d.withdraw(l.batch, len(missing))
		}
	}()
	reconnects := d.link.Reconnects()
	if err := l.publish(ctx, all()); err != nil {
		return all(), err
	}

	left := len(emails)
	stall := d.StallAfter
	heard := d.Now()
	var downSince time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for left > 0 {
		changed := d.link.Changed()
		select {
		case m := <-replies:
			if l.take(m, each) {
				left--
				heard, stall = d.Now(), d.StallAfter
			}
			continue
		case <-ctx.Done():
			if !d.link.Up() {
				return l.missing(), ErrUnavailable
			}
			return l.missing(), ErrTimeout
		case <-changed:
		case <-tick.C:
		}
		now := d.Now()
		if !d.link.Up() {
			if downSince.IsZero() {
				downSince = now
			}
			if now.Sub(downSince) > d.ListGrace {
				return l.missing(), ErrUnavailable
			}
			continue
		}
		downSince = time.Time{}
		if n := d.link.Reconnects(); n != reconnects {
			reconnects = n
		} else if now.Sub(heard) > stall {
			stall = min(2*stall, time.Minute)
		} else {
			continue
		}
		heard = now
		// Guarded: a broker that stops answering while we ask would otherwise hold the loop for
		// the stream info and the publish timeouts, and ListGrace would start that much late.
		gctx, release := d.link.Guard(ctx)
		lost := l.lost(gctx, l.missing())
		// A worker replies before it acknowledges (internal/verifyworker), so the answer to an
		// item the check found gone, unless it was lost, reached the inbox before the check's own
		// answer: read what is there before asking again, or that item is probed twice.
		for more := true; more && len(lost) > 0; {
			select {
			case m := <-replies:
				if l.take(m, each) {
					left--
					stall = d.StallAfter
				}
			default:
				more = false
			}
		}
		err := l.publish(gctx, l.undone(lost))
		cut := errors.Is(context.Cause(gctx), ErrLinkLost)
		release()
		if err != nil && ctx.Err() == nil && cut {
			// Cut off with the link: the loop above counts ListGrace from here if it is still
			// down; if it is already back (a blip), the items are asked for again after a
			// reconnect or the next stall, as any answer lost in the blip would be.
			continue
		}
		if err != nil && !errors.Is(err, ErrUnavailable) {
			return l.missing(), err
		}
	}
	return nil, nil
}

// lost is the missing items whose answers can no longer come: items that are no longer in the
// VERIFY stream, so a worker took and acknowledged them (or the stream forgot them) while their
// answer did not arrive. An item still in the stream is queued or being verified (work-queue
// streams drop an item only when it is acknowledged), and asking again for it would only
// duplicate work, which under load would feed the very backlog that made it late. One stream-info
// request, filtered to this list's subjects, tells which are still there.
func (l *list) lost(ctx context.Context, missing []int) []int {
	if len(missing) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, l.d.PublishTimeout)
	defer cancel()
	prefix := l.d.layout.Subject(SubjectVerifyItemPrefix) + l.batch + "."
	stream, err := l.d.js.Stream(cctx, l.d.layout.Name(StreamVerify))
	if err != nil {
		return missing // no stream: everything it held is gone
	}
	info, err := stream.Info(cctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return missing // cannot tell: asking again is safe, only wasteful
	}
	var out []int
	for _, i := range missing {
		if info.State.Subjects[prefix+strconv.Itoa(i)] == 0 {
			out = append(out, i)
		}
	}
	return out
}

// maxPurges bounds the purges in flight per Dispatcher (withdraw): a slow broker must not gather
// a goroutine per abandoned batch.
const maxPurges = 4

// withdraw purges the n items of batch still in the VERIFY stream: their caller has its answer
// (an error), so they would only be probed, at a customer's mail server, for nobody. A worker that
// already holds one looks it up in the stream before probing it once it has waited for a slot
// (internal/verifyworker), and drops it; one already being probed finishes.
//
// The purge runs after the caller has its answer, which a slow broker must not delay, bounded by
// PublishTimeout. It is skipped while the connection is down, after Close, and when maxPurges are
// already in flight (counted: NotWithdrawnItems); the items' deadline is what stops those
// (docs/reliability.md, "Batch and stream items").
func (d *Dispatcher) withdraw(batch string, n int) {
	if !d.link.Up() {
		return
	}
	d.purgesMu.Lock()
	defer d.purgesMu.Unlock()
	if d.closed {
		return
	}
	select {
	case d.purges <- struct{}{}:
	default:
		d.unwithdrawn.Add(uint64(n))
		return
	}
	d.purging.Add(1)
	go func() {
		defer d.purging.Done()
		defer func() { <-d.purges }()
		ctx, cancel := context.WithTimeout(context.Background(), d.PublishTimeout)
		defer cancel()
		stream, err := d.js.Stream(ctx, d.layout.Name(StreamVerify))
		if err != nil {
			return
		}
		if stream.Purge(ctx, jetstream.WithPurgeSubject(d.layout.Subject(SubjectVerifyItemPrefix)+batch+".>")) == nil {
			d.withdrawn.Add(uint64(n))
		}
	}()
}

// WithdrawnItems counts the batch and stream items taken out of the VERIFY stream because their
// caller was answered without them (VerifyMany): for mailvet_verify_items_withdrawn_total.
func (d *Dispatcher) WithdrawnItems() uint64 { return d.withdrawn.Load() }

// NotWithdrawnItems counts the batch and stream items left in the VERIFY stream after their
// caller was answered without them because maxPurges purges were already in flight (withdraw):
// for mailvet_verify_items_not_withdrawn_total.
func (d *Dispatcher) NotWithdrawnItems() uint64 { return d.unwithdrawn.Load() }

// list is one VerifyMany call's items.
type list struct {
	d        *Dispatcher
	emails   []string
	inbox    string
	batch    string
	deadline string
	done     []bool
	round    int
}

// take records the answer in m and hands it to each, unless it is not a valid answer or its
// index already has one; it reports whether it did.
func (l *list) take(m *nats.Msg, each func(i int, r verdict.Result)) bool {
	var r VerifyReply
	if json.Unmarshal(m.Data, &r) != nil || r.Result == nil || r.Index < 0 || r.Index >= len(l.emails) || l.done[r.Index] {
		return false
	}
	l.done[r.Index] = true
	if each != nil {
		each(r.Index, *r.Result)
	}
	return true
}

// undone is the indexes that still have no answer.
func (l *list) undone(indexes []int) []int {
	var out []int
	for _, i := range indexes {
		if !l.done[i] {
			out = append(out, i)
		}
	}
	return out
}

func (l *list) missing() []int {
	var m []int
	for i, ok := range l.done {
		if !ok {
			m = append(m, i)
		}
	}
	return m
}

// publish stores the items at indexes in the VERIFY stream. Each round has its own message ids:
// the stream's duplicate window would otherwise swallow a re-asked item whose first copy was
// already taken and acknowledged. A stream that is missing (a server that lost its store) is
// re-created, once, and the round published again.
func (l *list) publish(ctx context.Context, indexes []int) error {
	if len(indexes) == 0 {
		return nil
	}
	l.round++
	err := l.publishRound(ctx, indexes)
	if errors.Is(err, errNoStream) {
		cctx, cancel := context.WithTimeout(ctx, l.d.PublishTimeout)
		_, cerr := ensureStream(cctx, l.d.js, l.d.layout, StreamVerify)
		cancel()
		if cerr != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, cerr)
		}
		err = l.publishRound(ctx, indexes)
	}
	if errors.Is(err, errNoStream) {
		return fmt.Errorf("%w: the work queue is missing", ErrUnavailable)
	}
	return err
}

var errNoStream = errors.New("no stream")

func (l *list) publishRound(ctx context.Context, indexes []int) error {
	pctx, cancel := context.WithTimeout(ctx, l.d.PublishTimeout)
	defer cancel()
	round := strconv.Itoa(l.round)
	futures := make([]jetstream.PubAckFuture, 0, len(indexes))
	for _, i := range indexes {
		body, _ := json.Marshal(VerifyRequest{Email: l.emails[i], Index: i})
		id := l.batch + "." + strconv.Itoa(i)
		msg := nats.NewMsg(l.d.layout.Subject(SubjectVerifyItemPrefix) + id)
		msg.Data = body
		msg.Header.Set(HeaderReply, l.inbox)
		if l.deadline != "" {
			msg.Header.Set(HeaderDeadline, l.deadline)
		}
		f, err := l.d.js.PublishMsgAsync(msg, jetstream.WithMsgID(id+"."+round))
		if err != nil {
			if !l.d.link.Up() {
				return ErrUnavailable
			}
			return fmt.Errorf("%w: %v", ErrBusy, err)
		}
		futures = append(futures, f)
	}
	// Every item must be stored before we wait for answers: a full stream (DiscardNew) refuses
	// new items, which is the queue telling us to push back.
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			switch {
			case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
				return errNoStream
			case strings.Contains(err.Error(), "maximum"):
				return ErrBusy
			case !l.d.link.Up():
				return ErrUnavailable
			}
			return fmt.Errorf("%w: %v", ErrBusy, err)
		case <-pctx.Done():
			if ctx.Err() != nil && l.d.link.Up() {
				return ErrTimeout
			}
			return fmt.Errorf("%w: JetStream did not store the items within %v", ErrUnavailable, l.d.PublishTimeout)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Deadline reads the HeaderDeadline of msg; ok is false when it has none.
func Deadline(msg *nats.Msg) (time.Time, bool) {
	ms, err := strconv.ParseInt(msg.Header.Get(HeaderDeadline), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// PublishJob queues an async job whose row is already stored. The job id is the message id, so
// a retried publish of the same job is stored once. It fails at once while the connection is
// down, and within PublishTimeout when JetStream does not store the job.
func (d *Dispatcher) PublishJob(ctx context.Context, jobID uuid.UUID) error {
	if !d.link.Up() {
		return ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, d.PublishTimeout)
	defer cancel()
	err := PublishJob(ctx, d.js, d.layout, jobID)
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		if _, cerr := ensureStream(ctx, d.js, d.layout, StreamJobs); cerr == nil {
			err = PublishJob(ctx, d.js, d.layout, jobID)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: queue job: %v", ErrUnavailable, err)
	}
	return nil
}

// PublishJob publishes the job's message; the job id is its message id.
func PublishJob(ctx context.Context, js jetstream.JetStream, l Layout, jobID uuid.UUID) error {
	return RequeueJob(ctx, js, l, jobID, "")
}

// RequeueJob publishes the job's message again with message id "job.<id>.<round>" (round ""
// gives PublishJob's "job.<id>"). The stream drops a message whose id it saw within its duplicate
// window even when that message is gone since, so a re-queue of a job whose message was lost
// needs a round of its own; the same round from several sweeps is still published once.
func RequeueJob(ctx context.Context, js jetstream.JetStream, l Layout, jobID uuid.UUID, round string) error {
	body, _ := json.Marshal(JobMessage{JobID: jobID})
	id := "job." + jobID.String()
	if round != "" {
		id += "." + round
	}
	_, err := js.Publish(ctx, l.Subject(SubjectJob), body, jetstream.WithMsgID(id))
	return err
}

// WorkersAlive reports whether a verifier worker may be there to take batch items. It is false
// only when JetStream says positively that nobody is, and has said so since WorkersGone: the
// consumer does not exist, or it has neither a pull request waiting (an idle worker always keeps
// one open) nor a message being worked on (busy workers may have no pull open while their buffers
// are full). When JetStream cannot tell (a cluster electing a leader) it answers true.
//
// Why the memory: a worker whose NATS node died re-issues its pull requests on the new consumer
// leader only after its heartbeats lapse, so for a few seconds a live fleet shows no pull at all;
// a batch sent then is stored and taken as soon as the pulls return. Saying "no verifier worker
// is running" only when it has been true for a while keeps that 503 meaningful; a batch sent in
// the first seconds after the last worker really died ends at its deadline instead.
func (d *Dispatcher) WorkersAlive(ctx context.Context) bool {
	if !d.link.Up() {
		return false
	}
	if d.workersSeen(ctx) {
		d.lastAlive.Store(d.Now().UnixNano())
		return true
	}
	last := d.lastAlive.Load()
	return last != 0 && d.Now().Sub(time.Unix(0, last)) < d.WorkersGone
}

func (d *Dispatcher) workersSeen(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, d.PublishTimeout)
	defer cancel()
	c, err := d.js.Consumer(cctx, d.layout.Name(StreamVerify), d.layout.Name(ConsumerVerifiers))
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return false
	}
	if err != nil {
		return true
	}
	info, err := c.Info(cctx)
	if err != nil {
		return !errors.Is(err, jetstream.ErrConsumerNotFound)
	}
	return info.NumWaiting > 0 || info.NumAckPending > 0
}

// PublishChunks queues bulk-list chunks whose addresses are already stored. Message ids are
// "list.<id>.<chunk>" (plus ".<round>" for a re-queue by the sweep, for the reason RequeueJob
// gives), so a chunk published twice is stored once. A missing LISTS stream is re-created. Each
// publish is bounded by timeout; the first failure stops, and the sweep publishes the rest later.
func PublishChunks(ctx context.Context, js jetstream.JetStream, l Layout, timeout time.Duration, chunks []ChunkMessage, round func(ChunkMessage) string) error {
	for _, c := range chunks {
		body, _ := json.Marshal(c)
		id := "list." + c.ListID.String() + "." + strconv.Itoa(c.Chunk)
		if round != nil {
			if r := round(c); r != "" {
				id += "." + r
			}
		}
		publish := func() error {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := js.Publish(cctx, l.Subject(SubjectListChunk), body, jetstream.WithMsgID(id))
			return err
		}
		err := publish()
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			_, cerr := ensureStream(cctx, js, l, StreamLists)
			cancel()
			if cerr == nil {
				err = publish()
			}
		}
		if err != nil {
			return fmt.Errorf("%w: queue list chunk: %v", ErrUnavailable, err)
		}
	}
	return nil
}
