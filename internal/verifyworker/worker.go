// Package verifyworker is the verifier worker: it takes verification work from NATS — single
// addresses by request/reply, batch and stream items and async jobs from JetStream — runs the
// network layers of the pipeline, and answers. Any number of workers share the work.
package verifyworker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/verdict"
)

// Pipeline is the verification engine as the worker uses it.
type Pipeline interface {
	Verify(ctx context.Context, raw string) verdict.Result
	VerifyBatch(ctx context.Context, raws []string, each func(i int, r verdict.Result)) []verdict.Result
}

// Options tune a worker.
type Options struct {
	// Concurrency bounds the addresses this worker verifies at once, over all paths.
	Concurrency int
	// ItemAckWait is how long a batch item may stay unacknowledged before JetStream gives it to
	// another worker; a worker that dies mid-batch delays its items by at most this much.
	ItemAckWait time.Duration
	// SyncBudget bounds one synchronous verification when the request carries no deadline.
	SyncBudget time.Duration
	// Layout is the deployment's NATS layout (names, and the replication of a stream the worker
	// has to re-create); the zero Layout is unprefixed, one replica.
	Layout queue.Layout
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		// Enough for a whole 1,000-address stream to be with the SMTP prober at once: its
		// per-MX-address session cap, not this window, is what limits load on mail servers.
		o.Concurrency = 1024
	}
	if o.ItemAckWait <= 0 {
		o.ItemAckWait = 5 * time.Second
	}
	if o.SyncBudget <= 0 {
		o.SyncBudget = 5 * time.Second
	}
}

// maxGroup bounds how many batch items go to one VerifyBatch call.
const maxGroup = 64

// Worker serves verification work.
type Worker struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	pipe Pipeline
	log  *slog.Logger
	opts Options

	items    *queue.Consumer
	slots    chan struct{} // one token per address being verified
	claimsMu sync.Mutex
	claims   map[itemKey]struct{} // the items this worker holds (items.go)
	inflight sync.WaitGroup
	handled  *prometheus.CounterVec
	busy     prometheus.Counter
	dropped  *prometheus.CounterVec // reason: items dropped unprobed (items.go)
	lag      *queuelag.Recorder
}

// New returns a worker; register its metrics with reg (may be nil).
func New(nc *nats.Conn, js jetstream.JetStream, pipe Pipeline, log *slog.Logger, reg prometheus.Registerer, opts Options) *Worker {
	opts.defaults()
	w := &Worker{nc: nc, js: js, pipe: pipe, log: log, opts: opts, slots: make(chan struct{}, opts.Concurrency), claims: map[itemKey]struct{}{}}
	// Groups stay small (at most 64) so that one slow address holds few slots; the prober still
	// shares sessions across groups.
	w.items = queue.NewConsumer(js, queue.VerifyItemsConsumer(opts.Concurrency, opts.ItemAckWait), opts.Layout, w.group(), log)
	w.handled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailvet_verifier_addresses_total", Help: "Addresses verified, by path and status.",
	}, []string{"path", "status"})
	w.busy = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mailvet_verifier_busy_total", Help: "Synchronous requests refused because the worker was saturated.",
	})
	w.dropped = newDropped()
	if reg != nil {
		reg.MustRegister(w.handled, w.busy, w.dropped)
		w.lag = queuelag.New(reg)
	}
	return w
}

// Run serves until ctx ends, then stops taking work and waits for what is in flight. The item
// consumer heals by itself after NATS restarts or loses its store (queue.Consumer); the sync
// subscription is re-established by the client on every reconnect.
func (w *Worker) Run(ctx context.Context) error {
	subject := w.opts.Layout.Subject(queue.SubjectVerifySync)
	sub, err := w.nc.QueueSubscribe(subject, queue.QueueVerifiers, w.onSync)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	stopSync := context.AfterFunc(ctx, func() { _ = sub.Drain() })
	defer stopSync()
	msgs := make(chan *queued, w.group())
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		w.dispatchItems(msgs, w.group())
	}()
	// Intake stops when ctx ends; in-flight work then finishes and answers, because its callers
	// are still waiting. Unacked items left behind are redelivered to other workers.
	clock := newPullClock(w.group(), time.Now())
	_ = w.items.Run(ctx, func(m jetstream.Msg) {
		w.lag.Took(queuelag.ConsumerVerifyItems, m)
		// Held from here until it is answered, so that waiting for a slot cannot get it
		// redelivered and probed twice (items.go).
		if q := w.intake(m, clock.arrived(time.Now())); q != nil {
			msgs <- q
		}
		clock.handed(time.Now())
	})
	close(msgs)
	<-dispatched
	w.inflight.Wait()
	return nil
}

// Ready reports, for /readyz, whether the item consumer is running.
func (w *Worker) Ready(ctx context.Context) error { return w.items.Check(ctx) }

// group is the most items verified together in one VerifyBatch call.
func (w *Worker) group() int { return max(1, min(maxGroup, w.opts.Concurrency/4)) }

// onSync answers one synchronous request. NATS calls it serially per subscription, so the work
// runs in its own goroutine; when every slot is taken the worker says "busy" at once instead of
// queueing, and the API answers 503 rather than making the client wait.
func (w *Worker) onSync(msg *nats.Msg) {
	select {
	case w.slots <- struct{}{}:
	default:
		w.busy.Inc()
		_ = w.reply(msg.Reply, queue.VerifyReply{Error: queue.ReplyBusy})
		return
	}
	w.inflight.Add(1)
	go func() {
		defer w.inflight.Done()
		defer func() { <-w.slots }()
		var req queue.VerifyRequest
		if err := json.Unmarshal(msg.Data, &req); err != nil {
			w.log.Warn("bad sync request", "err", err)
			return
		}
		ctx, cancel := w.deadlineCtx(msg)
		defer cancel()
		stop := w.heartbeat(msg)
		// A panic on one address ends this request, not the worker: the caller is told this
		// worker cannot take it (503, nothing charged) rather than every worker it asks next dying
		// of the same address.
		defer w.survive("sync", func() {
			stop()
			_ = w.reply(msg.Reply, queue.VerifyReply{Error: queue.ReplyBusy})
		})
		r := w.pipe.Verify(ctx, req.Email)
		stop()
		w.handled.WithLabelValues("sync", string(r.Status)).Inc()
		_ = w.reply(msg.Reply, queue.VerifyReply{Index: req.Index, Result: &r})
	}()
}

// heartbeat tells the caller of a sync request that this worker has it and is still at work, as
// often as the request asks (queue.HeaderHeartbeat), until stop is called: a
// caller that stops hearing them asks another worker, so a worker killed mid-request costs its
// caller a second or two, not its deadline (docs/reliability.md).
func (w *Worker) heartbeat(msg *nats.Msg) (stop func()) {
	interval, ok := queue.Heartbeat(msg)
	if !ok || msg.Reply == "" {
		return func() {}
	}
	beat := func() {
		hb := nats.NewMsg(msg.Reply)
		hb.Header.Set(queue.HeaderWorking, "1")
		_ = w.nc.PublishMsg(hb)
	}
	// No beat at once: the caller counts its patience from the request, and most answers come
	// before the first interval ends, so that beat would only add a message to the fast path.
	return every(interval, beat) // a beat that crosses the answer is dropped by the caller
}

func (w *Worker) deadlineCtx(msg *nats.Msg) (context.Context, context.CancelFunc) {
	if dl, ok := queue.Deadline(msg); ok {
		return context.WithDeadline(context.Background(), dl)
	}
	return context.WithTimeout(context.Background(), w.opts.SyncBudget)
}

func (w *Worker) reply(subject string, r queue.VerifyReply) error {
	if subject == "" {
		return nil
	}
	b, _ := json.Marshal(r)
	if err := w.nc.Publish(subject, b); err != nil {
		w.log.Warn("reply", "err", err)
		return err
	}
	return nil
}

// dispatchItems groups whatever items are already waiting (up to max) into one VerifyBatch call.
func (w *Worker) dispatchItems(msgs <-chan *queued, max int) {
	for m := range msgs {
		group := loop.Gather([]*queued{m}, msgs, max)
		for range group {
			w.slots <- struct{}{}
		}
		w.inflight.Add(1)
		go func() {
			defer w.inflight.Done()
			defer func() {
				for range group {
					<-w.slots
				}
			}()
			w.verifyItems(group)
		}()
	}
}

type item struct {
	msg   *queued
	req   queue.VerifyRequest
	reply string
}

// verifyItems verifies a group of held items and answers each; an item it neither acknowledges
// nor terminates (its answer could not be sent) stops being kept alive when the group ends, and
// is redelivered after ItemAckWait.
func (w *Worker) verifyItems(group []*queued) {
	defer func() {
		for _, m := range group {
			w.done(m)
		}
	}()
	var (
		items    []item
		emails   []string
		deadline time.Time
	)
	gone := w.gone(group)
	for k, m := range group {
		if gone[k] {
			w.dropped.WithLabelValues(dropGone).Inc()
			continue // answered by a twin, or given up by its caller (items.go)
		}
		var req queue.VerifyRequest
		if err := json.Unmarshal(m.Data(), &req); err != nil {
			w.log.Warn("bad verify item", "err", err)
			_ = m.Term()
			continue
		}
		h := m.Headers()
		if ms, ok := queue.Deadline(&nats.Msg{Header: h}); ok {
			if time.Now().After(ms) {
				_ = m.Ack() // the caller has given up; verifying would help nobody
				continue
			}
			if ms.After(deadline) {
				deadline = ms
			}
		}
		items = append(items, item{msg: m, req: req, reply: h.Get(queue.HeaderReply)})
		emails = append(emails, req.Email)
	}
	if len(items) == 0 {
		return
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(w.opts.SyncBudget)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var mu sync.Mutex
	answered := make([]bool, len(items))
	// A panic on one address ends its group, not the worker: the items not answered are taken
	// off the stream (Term) instead of being handed to the next worker to die of them, and their
	// caller, hearing nothing, answers them as not verified and charges nothing.
	defer w.survive("batch", func() {
		mu.Lock()
		defer mu.Unlock()
		for i, it := range items {
			if !answered[i] {
				_ = it.msg.Term()
			}
		}
	})
	w.pipe.VerifyBatch(ctx, emails, func(i int, r verdict.Result) {
		mu.Lock()
		answered[i] = true
		mu.Unlock()
		it := items[i]
		w.handled.WithLabelValues("batch", string(r.Status)).Inc()
		// Ack only after the reply is published: a crash between the two, or a reply that
		// could not be sent (the connection is down), leaves the item to be redelivered, and
		// the API ignores a duplicate answer.
		if w.reply(it.reply, queue.VerifyReply{Index: it.req.Index, Result: &r}) == nil {
			_ = it.msg.Ack()
		}
	})
}

// survive, deferred, turns a panic of the verification on path into a log line with its stack
// (no address: the panic value is not logged, it may quote one) and a call to undo, so that one
// address cannot end the process and, redelivered, every worker after it.
func (w *Worker) survive(path string, undo func()) {
	p := recover()
	if p == nil {
		return
	}
	w.log.Error("verification panicked", "path", path, "panic_type", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
	undo()
}
