package verifyworker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
)

// A batch or stream item is probed at most once per request (docs/reliability.md, "Batch and
// stream items"). Under saturation an item can wait for a slot longer than ItemAckWait, and
// JetStream then hands a second copy of it to whichever worker pulls next; both copies would
// reach the customer's mail server. So a worker:
//   - keeps every item it has taken alive (held, InProgress) until it answers it, so that
//     waiting in this worker never lets AckWait run out;
//   - drops, untouched, an item that may have outlived its AckWait in the pull buffer before it
//     was taken (staleness): JetStream has given, or is about to give, a copy of it to another
//     worker, and that copy is the one that answers;
//   - takes at most one copy of an item at a time (a copy of an item it already holds is dropped);
//   - before probing an item that waited for its slot, or is a redelivery, asks the stream
//     whether the item is still there: a work-queue stream drops an item once it is acknowledged
//     (a twin answered it) or purged (its caller gave up: queue.Dispatcher), and an item that is
//     gone is not probed.

// waitedCheck is how long an item may wait for its slot and still be probed without asking the
// stream first: on the normal path items start at once and pay nothing.
const waitedCheck = 100 * time.Millisecond

// checkBudget bounds the stream look-up before a waited item is probed; an item the stream
// cannot be asked about is probed (losing it would cost its caller a 503).
const checkBudget = time.Second

// queued is an item taken from the VERIFY stream, held until it is answered.
type queued struct {
	*held
	key   itemKey
	taken time.Time
	// redelivered: a copy of this item went to a worker before.
	redelivered bool
}

// itemKey names one stored item: its stream sequence, and its store time so that a stream
// re-created with sequences starting again cannot alias an item held from before.
type itemKey struct {
	seq    uint64
	stored int64
}

// intake takes m, which may have sat in the pull buffer for up to buffered: it returns nil when m
// is not to be verified here (see above).
func (w *Worker) intake(m jetstream.Msg, buffered time.Duration) *queued {
	if buffered > w.opts.ItemAckWait/2 {
		w.dropped.WithLabelValues(dropStale).Inc()
		return nil // possibly redelivered already; the copy JetStream hands out next answers
	}
	q := &queued{taken: time.Now()}
	if md, err := m.Metadata(); err == nil {
		q.key = itemKey{seq: md.Sequence.Stream, stored: md.Timestamp.UnixNano()}
		q.redelivered = md.NumDelivered > 1
		if !w.claim(q.key) {
			w.dropped.WithLabelValues(dropHeld).Inc()
			return nil // the copy this worker holds answers it, and acknowledges it for both
		}
	}
	q.held = hold(m, w.opts.ItemAckWait)
	return q
}

// pullClock bounds how long the next message out of the pull iterator may have sat in its
// buffer, unattended, with its AckWait running: the buffer fills while the reader is blocked
// handing a message over (every slot busy). A message arrived after both
//   - the hand-over of the message pull places before it: nats.go's iterator asks for a message
//     only while fewer than pull are asked for and not yet taken;
//   - the last message the iterator had to wait for (emptyAfter): the buffer was empty then, and
//     the iterator returns the first message that arrives.
//
// The reader calls it from one goroutine at a time.
type pullClock struct {
	ends     []time.Time // when each of the last pull messages was handed over, a ring
	n        int         // messages handed over
	returned time.Time   // when the reader last went back to the iterator
	empty    time.Time   // when a message last came into an empty buffer
}

// emptyAfter: an iterator that took this long to return a message had none buffered.
const emptyAfter = time.Millisecond

func newPullClock(pull int, start time.Time) *pullClock {
	c := &pullClock{ends: make([]time.Time, max(1, pull)), returned: start, empty: start}
	for i := range c.ends {
		c.ends[i] = start
	}
	return c
}

// arrived is called when the iterator returns a message; it reports how long that message may
// have been buffered.
func (c *pullClock) arrived(now time.Time) time.Duration {
	if now.Sub(c.returned) >= emptyAfter {
		c.empty = now // it was waited for: it arrived just now
		return 0
	}
	since := c.ends[c.n%len(c.ends)]
	if c.empty.After(since) {
		since = c.empty
	}
	return now.Sub(since)
}

// handed is called when the message that last arrived has been handed over.
func (c *pullClock) handed(now time.Time) {
	c.ends[c.n%len(c.ends)] = now
	c.n++
	c.returned = now
}

// done releases q after its group: it is no longer kept alive, and a later copy may be taken.
func (w *Worker) done(q *queued) {
	q.release()
	if q.key != (itemKey{}) {
		w.claimsMu.Lock()
		delete(w.claims, q.key)
		w.claimsMu.Unlock()
	}
}

func (w *Worker) claim(k itemKey) bool {
	w.claimsMu.Lock()
	defer w.claimsMu.Unlock()
	if _, ok := w.claims[k]; ok {
		return false
	}
	w.claims[k] = struct{}{}
	return true
}

// gone reports, for each of group, whether it must not be probed because it is no longer in the
// stream; only items that waited or were redelivered are looked up, concurrently.
func (w *Worker) gone(group []*queued) []bool {
	out := make([]bool, len(group))
	var check []int
	for i, q := range group {
		if q.key != (itemKey{}) && (q.redelivered || time.Since(q.taken) > waitedCheck) {
			check = append(check, i)
		}
	}
	if len(check) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkBudget)
	defer cancel()
	stream, err := w.js.Stream(ctx, w.opts.Layout.Name(queue.StreamVerify))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		for _, i := range check {
			out[i] = true
		}
		return out
	}
	if err != nil {
		return out
	}
	var wg sync.WaitGroup
	for _, i := range check {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := stream.GetMsg(ctx, group[i].key.seq)
			out[i] = errors.Is(err, jetstream.ErrMsgNotFound)
		}()
	}
	wg.Wait()
	return out
}
