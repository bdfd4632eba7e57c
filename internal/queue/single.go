package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/mailvet/mailvet/internal/verdict"
)

// syncAsks bounds how often one single verification is sent to the fleet because its worker went
// silent: a fleet where every worker is stuck must not be flooded with the same address.
const syncAsks = 3

// VerifyOne verifies one address over core NATS: the lowest-latency path, with nothing persisted
// because the caller is waiting (docs/reliability.md, "A worker killed in the middle of a single
// verification").
//
// Core NATS cannot tell that the worker which took a request has died, so the worker says every
// WorkerSilence/4 that it is still at work (HeaderHeartbeat). A request that hears nothing for
// WorkerSilence — its worker was killed, froze, or took it and never said so — is sent again to
// any worker, at most syncAsks times in all, on the same inbox: whichever answer comes first is
// the result. A "busy" or "no responders" to such a later ask does not end the request, since the
// first worker may still answer. So a killed worker costs its requests about WorkerSilence, not
// their whole deadline and a 503.
//
// A request whose connection drops (or stops answering) while it waits is sent again once the
// connection is back within SyncGrace, and answers ErrUnavailable otherwise.
func (d *Dispatcher) VerifyOne(ctx context.Context, email string) (verdict.Result, error) {
	if !d.link.Up() {
		return verdict.Result{}, ErrUnavailable
	}
	w, err := d.replies.open(d.nc)
	if err != nil {
		return verdict.Result{}, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	defer d.replies.done(w)
	body, _ := json.Marshal(VerifyRequest{Email: email})
	silence := d.WorkerSilence

	var giveUp time.Time // set when the connection is first seen lost
	// linkBack waits, within SyncGrace of the connection's first loss, for it to come back.
	linkBack := func() error {
		if giveUp.IsZero() {
			giveUp = time.Now().Add(d.SyncGrace)
		}
		if wait := time.Until(giveUp); wait <= 0 || !d.link.WaitUp(ctx, wait) {
			return ErrUnavailable
		}
		return nil
	}
	asks := 0
	ask := func() error {
		for {
			msg := nats.NewMsg(d.layout.Subject(SubjectVerifySync))
			msg.Reply, msg.Data = w.inbox, body
			if dl, ok := ctx.Deadline(); ok {
				msg.Header.Set(HeaderDeadline, strconv.FormatInt(dl.UnixMilli(), 10))
			}
			if silence > 0 {
				msg.Header.Set(HeaderHeartbeat, strconv.FormatInt(max(1, (silence/4).Milliseconds()), 10))
			}
			w.heard.Store(time.Now().UnixNano())
			err := d.nc.PublishMsg(msg)
			if err == nil {
				asks++
				return nil
			}
			if d.link.Up() {
				return fmt.Errorf("%w: %v", ErrBusy, err)
			}
			if err := linkBack(); err != nil {
				return err
			}
		}
	}
	if err := ask(); err != nil {
		return verdict.Result{}, err
	}
	var (
		resent  bool  // sent again because the worker that took it went silent
		refused error // the last "busy" or "no responders" since
	)
	for {
		actx, release := d.link.Guard(ctx)
		var wake <-chan time.Time
		t := time.NewTimer(time.Until(time.Unix(0, w.heard.Load()).Add(silence)))
		if silence > 0 && asks < syncAsks {
			wake = t.C
		}
		var m *nats.Msg
		select {
		case m = <-w.replies:
		case <-wake:
		case <-actx.Done():
		}
		t.Stop()
		lost := errors.Is(context.Cause(actx), ErrLinkLost)
		release()
		switch {
		case m != nil && noResponders(m) && !giveUp.IsZero() && time.Now().Before(giveUp):
			// Right after a reconnect the workers may not have subscribed again yet: asked
			// again until the grace period ends.
			sleep(ctx, 50*time.Millisecond)
		case m != nil:
			refusal := ErrNoWorkers
			if !noResponders(m) {
				var r VerifyReply
				if err := json.Unmarshal(m.Data, &r); err != nil {
					return verdict.Result{}, fmt.Errorf("decode worker reply: %w", err)
				}
				if r.Result != nil {
					return *r.Result, nil
				}
				refusal = ErrBusy
			}
			if !resent {
				return verdict.Result{}, refusal
			}
			// A refusal of an ask sent because a worker went silent: that worker may be alive
			// after all (frozen for a while, or an older one that sends no heartbeats), and
			// its answer is still welcome. Wait on, asking again when silent.
			refused = refusal
			continue
		case ctx.Err() != nil:
			if !d.link.Up() {
				// Even when ctx ended first: the broker, not the workers, is what failed.
				return verdict.Result{}, ErrUnavailable
			}
			if refused != nil {
				return verdict.Result{}, refused
			}
			return verdict.Result{}, ErrTimeout
		case lost || !d.link.Up():
			// The request or its reply may have gone with the connection.
			if err := linkBack(); err != nil {
				return verdict.Result{}, err
			}
		case time.Since(time.Unix(0, w.heard.Load())) < silence:
			continue // a heartbeat came in while the timer fired
		default:
			d.silent.Add(1)
			resent = true
		}
		if err := ask(); err != nil {
			return verdict.Result{}, err
		}
	}
}

// SilentWorkerReasks counts the single verifications sent to the fleet again because the worker
// that took them went silent (killed, frozen): for mailvet_sync_reasks_total.
func (d *Dispatcher) SilentWorkerReasks() uint64 { return d.silent.Load() }

// noResponders reports whether m is the server's "no responders" status: nobody was subscribed
// to the request's subject when it was published.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// Heartbeat reads the HeaderHeartbeat of a verify.sync request: how often its caller wants to
// hear that the worker is still at it. ok is false when the request asks for none (an older API
// replica) or the value is out of range.
func Heartbeat(msg *nats.Msg) (every time.Duration, ok bool) {
	ms, err := strconv.Atoi(msg.Header.Get(HeaderHeartbeat))
	if err != nil || ms < 10 || ms > 60_000 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// Working reports whether m is a worker's heartbeat rather than its answer.
func Working(m *nats.Msg) bool { return m.Header.Get(HeaderWorking) != "" }

// replyMux is one wildcard subscription that receives the replies of every single verification
// of a dispatcher, each on its own inbox under it. A request hears its worker's heartbeats and its
// answer on one inbox however often it is sent, and costs no SUB and UNSUB of its own.
type replyMux struct {
	mu      sync.Mutex
	sub     *nats.Subscription
	prefix  string
	closed  bool
	waiting sync.Map // inbox → *syncWait
}

// syncWait is one single verification waiting on the mux.
type syncWait struct {
	inbox string
	// heard is when a worker last said anything about the request (Unix nanoseconds), or when
	// it was last sent.
	heard atomic.Int64
	// replies takes the answers, "busy" and "no responders"; heartbeats only set heard.
	replies chan *nats.Msg
}

// open registers a new request on the mux, subscribing on first use.
func (x *replyMux) open(nc *nats.Conn) (*syncWait, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, errors.New("the dispatcher is closed")
	}
	if x.sub == nil {
		prefix := nc.NewInbox() + "."
		sub, err := nc.Subscribe(prefix+"*", x.deliver)
		if err != nil {
			return nil, err
		}
		// Pending limits as for any subscription; a request that overflows them is asked again
		// after WorkerSilence like one whose worker went silent.
		x.sub, x.prefix = sub, prefix
	}
	w := &syncWait{inbox: x.prefix + nuid.Next(), replies: make(chan *nats.Msg, 4)}
	x.waiting.Store(w.inbox, w)
	return w, nil
}

// done forgets w: later replies to it are dropped.
func (x *replyMux) done(w *syncWait) { x.waiting.Delete(w.inbox) }

// deliver routes one reply to its request. It never blocks: the callback serves every request.
func (x *replyMux) deliver(m *nats.Msg) {
	v, ok := x.waiting.Load(m.Subject)
	if !ok {
		return // the request has ended: a second answer, or a heartbeat on its way
	}
	w := v.(*syncWait)
	w.heard.Store(time.Now().UnixNano())
	if Working(m) {
		return
	}
	select {
	case w.replies <- m:
	default: // the request has more answers than it will read
	}
}

// close ends the subscription. The unsubscribe does not wait: nats.go holds the connection's lock
// while it dials a server that does not answer, and a closing process must not.
func (x *replyMux) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	if sub := x.sub; sub != nil {
		go func() { _ = sub.Unsubscribe() }()
	}
}
