package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrLinkLost is the cause of a guarded context that was cancelled because the NATS connection
// dropped, or stopped answering: whatever was sent on it may have been lost, so the caller asks
// again or gives up.
var ErrLinkLost = errors.New("the NATS connection dropped")

// The health probe of a watched connection (see Link). A PING answered within ProbeTimeout keeps
// the link up; one that is not marks it down until a later one is answered or the client
// reconnects. So a black-holed connection is seen within ProbeEvery + ProbeTimeout. The timeout
// is well above any round trip to a healthy server, including a busy one behind a loaded client:
// a false alarm refuses requests for as long as it lasts.
const (
	ProbeEvery   = 500 * time.Millisecond
	ProbeTimeout = 2 * time.Second
)

// Link watches one NATS connection for the callers that must not wait behind a reconnect.
//
// Why: with ReconnectBufSize(-1) (see Connect) nothing is buffered while the connection is
// down, so a publish fails at once; but a request already sent, or a reply a worker published
// while we were away, is simply gone, and core NATS says nothing about it. Link tells those
// callers at once (Guard, Changed) and lets them notice a reconnect they slept through
// (Reconnects), so they can ask again instead of waiting for their deadline.
//
// A connection can also be dead while its socket stays open: a network partition, or a server
// host gone without closing its connections, swallows every byte and the client's status stays
// CONNECTED until its own pings lapse (Connect: seconds; the nats.go default: minutes). So the
// link also probes the connection (a PING, ProbeEvery, answered within ProbeTimeout) and counts
// it down while a probe goes unanswered, exactly as when it drops: Up is false, guards are
// cancelled, Changed fires. The probe runs beside the traffic, never on a request's path. See
// docs/reliability.md.
type Link struct {
	nc    *nats.Conn
	w     *watcher      // shared by every Link on nc; nil when nc is
	never chan struct{} // Changed of a link without a connection

	mu     sync.Mutex
	guards map[uint64]context.CancelCauseFunc
	next   uint64
	once   sync.Once
}

// Watch starts watching nc; Close stops it. A nil nc (a process without NATS, as in some tests)
// is a link that is never up.
func Watch(nc *nats.Conn) *Link {
	l := &Link{nc: nc, guards: map[uint64]context.CancelCauseFunc{}}
	if nc == nil {
		l.never = make(chan struct{})
		return l
	}
	watchersMu.Lock()
	w := watchers[nc]
	if w == nil {
		w = startWatcher(nc)
		watchers[nc] = w
	}
	w.links[l] = struct{}{}
	watchersMu.Unlock()
	l.w = w
	return l
}

// Close stops watching; guarded contexts are left to their parents.
func (l *Link) Close() {
	if l.w == nil {
		return
	}
	l.once.Do(func() {
		watchersMu.Lock()
		delete(l.w.links, l)
		last := len(l.w.links) == 0
		if last && watchers[l.nc] == l.w {
			delete(watchers, l.nc)
		}
		watchersMu.Unlock()
		if last {
			l.w.close()
		}
	})
}

// Up reports whether the connection is established right now and answered its last probe. It
// never waits: it reads what the watcher last heard, not the connection, whose lock nats.go holds
// while a reconnect waits (up to its connect timeout) for a server that does not answer.
func (l *Link) Up() bool {
	return l.nc != nil && l.w.up()
}

// Reconnects counts the reconnects so far; a caller that saw it change knows that replies
// addressed to it in between may have been dropped.
func (l *Link) Reconnects() uint64 {
	if l.nc == nil {
		return 0
	}
	return l.nc.Stats().Reconnects
}

// Changed returns a channel that is closed at the connection's next change: a status change, or
// a probe that goes unanswered (or is answered again). Take it before checking Up, so that no
// change between the two is missed.
func (l *Link) Changed() <-chan struct{} {
	if l.w == nil {
		return l.never
	}
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.changed
}

// Guard returns a context that is cancelled, with cause ErrLinkLost, as soon as the connection
// drops or stops answering, and a release function the caller must call when done with it.
func (l *Link) Guard(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	l.mu.Lock()
	id := l.next
	l.next++
	l.guards[id] = cancel
	l.mu.Unlock()
	if !l.Up() {
		cancel(ErrLinkLost)
	}
	return ctx, func() {
		l.mu.Lock()
		delete(l.guards, id)
		l.mu.Unlock()
		cancel(nil)
	}
}

// lost cancels every guarded context.
func (l *Link) lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, cancel := range l.guards {
		cancel(ErrLinkLost)
		delete(l.guards, id)
	}
}

// WaitUp waits up to grace for the connection to be established and reports whether it is.
func (l *Link) WaitUp(ctx context.Context, grace time.Duration) bool {
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		ch := l.Changed()
		if l.Up() {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return l.Up()
		case <-ctx.Done():
			return false
		}
	}
}

// watcher is the one status listener and health probe of a connection, shared by all its Links:
// a process watches its connection from several places (the dispatcher, the stream keeper, each
// consumer), and one PING per ProbeEvery tells them all.
type watcher struct {
	nc     *nats.Conn
	events chan nats.Status
	links  map[*Link]struct{} // guarded by watchersMu
	stop   chan struct{}      // closed to stop the probe
	done   chan struct{}      // closed when the status listener has stopped
	once   sync.Once

	mu      sync.Mutex
	changed chan struct{} // closed at the next change, then replaced
	status  nats.Status   // the connection's, as its last status event said
	stale   bool          // the last probe on the current connection went unanswered
	gen     uint64        // status changes so far: a probe that spans one says nothing of now
}

var (
	watchersMu sync.Mutex
	watchers   = map[*nats.Conn]*watcher{}
)

func startWatcher(nc *nats.Conn) *watcher {
	w := &watcher{nc: nc, events: nc.StatusChanged(), links: map[*Link]struct{}{}, stop: make(chan struct{}),
		done: make(chan struct{}), changed: make(chan struct{})}
	// After the listener is registered: a change from here on arrives as an event too.
	w.status = nc.Status()
	go w.listen()
	go w.probe()
	return w
}

// close stops the listener, and the probe without waiting for a PING in flight (at most
// ProbeTimeout): a process that stops must not wait for a dead connection.
func (w *watcher) close() {
	w.once.Do(func() {
		w.nc.RemoveStatusListener(w.events)
		close(w.stop)
	})
	<-w.done
}

func (w *watcher) up() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status == nats.CONNECTED && !w.stale
}

// signal wakes every Changed waiter. w.mu must be held.
func (w *watcher) signal() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// lost cancels the guards of every link on the connection.
func (w *watcher) lost() {
	watchersMu.Lock()
	links := make([]*Link, 0, len(w.links))
	for l := range w.links {
		links = append(links, l)
	}
	watchersMu.Unlock()
	for _, l := range links {
		l.lost()
	}
}

func (w *watcher) listen() {
	defer close(w.done)
	for s := range w.events {
		// A new status is a new connection, or none: what a probe said of the old one is void.
		w.mu.Lock()
		w.gen++
		w.status = s
		w.stale = false
		w.signal()
		w.mu.Unlock()
		if s != nats.CONNECTED {
			w.lost()
		}
		if s == nats.CLOSED {
			// For good: stop probing, and let a later Watch of nc start afresh.
			watchersMu.Lock()
			if watchers[w.nc] == w {
				delete(watchers, w.nc)
			}
			watchersMu.Unlock()
			w.once.Do(func() {
				w.nc.RemoveStatusListener(w.events)
				close(w.stop)
			})
		}
	}
}

// probe sends a PING every ProbeEvery while the connection is up, and marks it stale while one
// goes unanswered for ProbeTimeout. A dropped or closed connection is the status listener's to
// report, so only a timeout counts.
func (w *watcher) probe() {
	t := time.NewTicker(ProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		gen, status := w.gen, w.status
		w.mu.Unlock()
		switch status {
		case nats.CLOSED:
			return
		case nats.CONNECTED:
		default:
			continue
		}
		err := w.nc.FlushTimeout(ProbeTimeout)
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			continue
		}
		stale := err != nil
		w.mu.Lock()
		if gen != w.gen || w.stale == stale {
			w.mu.Unlock()
			continue
		}
		w.stale = stale
		w.signal()
		w.mu.Unlock()
		if stale {
			w.lost()
		}
	}
}
