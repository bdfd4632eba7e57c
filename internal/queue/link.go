package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrLinkLost is the cause of a guarded context that was cancelled because the NATS connection
// dropped: whatever was sent on it may have been lost, so the caller asks again or gives up.
var ErrLinkLost = errors.New("the NATS connection dropped")

// Link watches one NATS connection for the callers that must not wait behind a reconnect.
//
// Why: with ReconnectBufSize(-1) (see Connect) nothing is buffered while the connection is
// down, so a publish fails at once; but a request already sent, or a reply a worker published
// while we were away, is simply gone, and core NATS says nothing about it. Link tells those
// callers at once (Guard, Changed) and lets them notice a reconnect they slept through
// (Reconnects), so they can ask again instead of waiting for their deadline. See
// docs/reliability.md.
type Link struct {
	nc     *nats.Conn
	events chan nats.Status

	mu      sync.Mutex
	changed chan struct{} // closed at the next status change, then replaced
	guards  map[uint64]context.CancelCauseFunc
	next    uint64
	done    chan struct{}
}

// Watch starts watching nc; Close stops it. A nil nc (a process without NATS, as in some tests)
// is a link that is never up.
func Watch(nc *nats.Conn) *Link {
	l := &Link{nc: nc, changed: make(chan struct{}), guards: map[uint64]context.CancelCauseFunc{}, done: make(chan struct{})}
	if nc == nil {
		close(l.done)
		return l
	}
	l.events = nc.StatusChanged()
	go l.run()
	return l
}

func (l *Link) run() {
	defer close(l.done)
	for s := range l.events {
		l.mu.Lock()
		close(l.changed)
		l.changed = make(chan struct{})
		if s != nats.CONNECTED {
			for id, cancel := range l.guards {
				cancel(ErrLinkLost)
				delete(l.guards, id)
			}
		}
		l.mu.Unlock()
		if s == nats.CLOSED {
			return
		}
	}
}

// Close stops watching; guarded contexts are left to their parents.
func (l *Link) Close() {
	if l.nc != nil {
		l.nc.RemoveStatusListener(l.events)
	}
	<-l.done
}

// Up reports whether the connection is established right now.
func (l *Link) Up() bool { return l.nc != nil && l.nc.Status() == nats.CONNECTED }

// Reconnects counts the reconnects so far; a caller that saw it change knows that replies
// addressed to it in between may have been dropped.
func (l *Link) Reconnects() uint64 {
	if l.nc == nil {
		return 0
	}
	return l.nc.Stats().Reconnects
}

// Changed returns a channel that is closed at the connection's next status change. Take it
// before checking Up, so that no change between the two is missed.
func (l *Link) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Guard returns a context that is cancelled, with cause ErrLinkLost, as soon as the connection
// drops, and a release function the caller must call when done with it.
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
