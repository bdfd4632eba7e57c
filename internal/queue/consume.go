package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// drainWait bounds how long a stopping consumer waits for its iterator to drain.
const drainWait = time.Second

// ConsumerSpec is a durable pull consumer and the stream it reads.
type ConsumerSpec struct {
	Stream string
	Config jetstream.ConsumerConfig
}

// Consumer runs one durable pull consumer for as long as its context lasts, through NATS
// restarts, lost stores and leader changes.
//
// Why: a pull iterator outlives a reconnect, but not the loss of its consumer. A NATS server that
// restarts with an empty store (or a memory stream that is gone) leaves the iterator waiting for
// heartbeats that never come, and a worker that stops on that error stops for good. So Consumer
// creates the stream (if missing) and the consumer before it pulls, re-creates both right after
// every reconnect, and when the iterator fails (missed heartbeats, consumer deleted) it throws the
// iterator away and starts over with backoff. Every worker loop of every tier runs on it, so they
// all start, heal and stop the same way. See docs/reliability.md.
type Consumer struct {
	js     jetstream.JetStream
	spec   ConsumerSpec // with the layout's names
	layout Layout
	base   string // the stream's base name, to re-create it
	log    *slog.Logger

	// Pull is how many messages the iterator keeps buffered ahead of the handler.
	Pull int
	// Heartbeat is how often an idle pull request hears from the server; two missed ones mean
	// the consumer (or the server) is gone and the iterator is rebuilt.
	Heartbeat time.Duration

	running atomic.Bool
}

// NewConsumer returns a consumer of spec (base names, as consumers.go builds it) in layout l on
// js; a stream it has to create is made as l says.
func NewConsumer(js jetstream.JetStream, spec ConsumerSpec, l Layout, pull int, log *slog.Logger) *Consumer {
	base := spec.Stream
	spec.Stream = l.Name(spec.Stream)
	spec.Config.Durable = l.Name(spec.Config.Durable)
	spec.Config.FilterSubject = l.Subject(spec.Config.FilterSubject)
	return &Consumer{js: js, spec: spec, layout: l, base: base, log: log, Pull: max(1, pull), Heartbeat: 2 * time.Second}
}

// Name is the durable consumer's name.
func (c *Consumer) Name() string { return c.spec.Config.Durable }

// Run hands each message to handle, one at a time, until ctx ends. handle may wait (for a free
// slot, say); the messages the iterator has buffered wait with it. When ctx ends, Run stops pulling
// and returns once the messages already buffered have been handed back (Nak) for another replica
// to take at once; work still in flight in the caller's goroutines is the caller's to wait for.
func (c *Consumer) Run(ctx context.Context, handle func(jetstream.Msg)) error {
	link := Watch(c.js.Conn())
	defer link.Close()
	wait := backoff.NewExponentialBackOff()
	wait.InitialInterval, wait.MaxInterval, wait.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	for ctx.Err() == nil {
		// Counted before the iterator is opened: a reconnect while it opens, or before pump
		// looks, would otherwise go unseen, and with it the re-pull that pump guards against.
		reconnects := link.Reconnects()
		it, err := c.start(ctx)
		if err == nil {
			wait.Reset()
			c.running.Store(true)
			err = c.pump(ctx, link, reconnects, it, handle)
			c.running.Store(false)
			if errors.Is(err, errLinkDropped) {
				continue // a fresh iterator, with an empty buffer, now that the link is back
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		pause := wait.NextBackOff()
		c.log.Warn("consumer not running; starting it again", "consumer", c.Name(), "in", pause, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return nil
}

// errLinkDropped ends an iterator that was drained after a reconnect (see pump).
var errLinkDropped = errors.New("the NATS connection dropped under the iterator")

// start makes sure the stream and the consumer exist and opens an iterator on them.
func (c *Consumer) start(ctx context.Context) (jetstream.MessagesContext, error) {
	cons, err := c.ensure(ctx)
	if err != nil {
		return nil, err
	}
	return cons.Messages(jetstream.PullMaxMessages(c.Pull), jetstream.PullHeartbeat(c.Heartbeat))
}

func (c *Consumer) ensure(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if created, err := ensureStream(ctx, c.js, c.layout, c.base); err != nil {
		return nil, err
	} else if created {
		c.log.Info("stream re-created", "stream", c.spec.Stream)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.spec.Stream, c.spec.Config)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", c.Name(), err)
	}
	return cons, nil
}

// pump reads it until it fails, it is replaced after a reconnect (errLinkDropped) or ctx ends.
// reconnects is the link's count from before it was opened.
//
// An iterator does not outlive a reconnect. nats.go's iterator counts the messages it asked for
// and has not handed over yet; a reconnect resets that count to zero and asks the server for a
// full buffer again, while the buffer may still be full behind a busy handler: the new messages
// overflow it and are dropped as a slow consumer, to come back only after AckWait (a list paused
// 22 s in a fault campaign). So while the link is down (or not answering) the reader asks the
// iterator for nothing more, and once the link is back pump drains the iterator: no more pulls,
// what it holds is handed to handle as usual, and Run starts a new one. The drain waits for the
// link because it is also what tells the server to stop serving the old pull request: drained
// while the link is down, the unsubscribe is never sent (nats.go re-subscribes the old inbox at
// the reconnect and then drops what arrives on it), and messages the server hands to the old
// request are lost until AckWait. See docs/reliability.md.
//
// The reads run in their own goroutine, so that stopping never waits for NATS: a Next waiting on
// a server that stopped answering (a black hole, a SIGSTOPped server: the connection still looks
// up) returns only when the connection is closed, and the iterator's Stop does nothing once Drain
// was called. So when ctx ends, pump drains for at most drainWait, then stops the iterator and
// returns as soon as the message being handed to handle, if any, is done; a read left behind
// hands back (Nak) whatever it still gets and ends when the process closes its connection.
func (c *Consumer) pump(ctx context.Context, link *Link, reconnects uint64, it jetstream.MessagesContext, handle func(jetstream.Msg)) error {
	defer it.Stop()
	// handling is held while a message is checked against ctx and handed to handle: once pump
	// has taken it after ctx ended, no read hands a message to handle any more.
	var handling sync.Mutex
	// held, while the link is down, is closed when the reader may read again.
	var (
		heldMu sync.Mutex
		held   chan struct{}
	)
	hold := func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		if held == nil {
			held = make(chan struct{})
		}
	}
	release := func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		if held != nil {
			close(held)
			held = nil
		}
	}
	isHeld := func() bool {
		heldMu.Lock()
		defer heldMu.Unlock()
		return held != nil
	}
	done := make(chan error, 1)
	go func() {
		for {
			heldMu.Lock()
			h := held
			heldMu.Unlock()
			if h != nil {
				select {
				case <-h:
				case <-ctx.Done():
				}
			}
			m, err := it.Next()
			if err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				done <- err
				return
			}
			handling.Lock()
			if ctx.Err() != nil {
				handling.Unlock()
				_ = m.Nak() // stopping: another replica takes it now rather than after AckWait
				continue
			}
			handle(m)
			handling.Unlock()
		}
	}()
	drained := false
	for {
		// The link's state is read after its Changed channel is taken, so that no change
		// between the two goes unseen.
		changed := link.Changed()
		if !drained {
			switch {
			case !link.Up():
				hold()
			case isHeld() || link.Reconnects() != reconnects:
				// Back (or a reconnect this pump saw only the end of): the reader drains
				// what the iterator holds, then Run starts a new one. The drain comes before
				// the reader is let go, so that its next read cannot be the re-pull.
				drained = true
				it.Drain()
				release()
			}
		}
		select {
		case err := <-done:
			if drained && ctx.Err() == nil {
				return errLinkDropped
			}
			return err
		case <-changed:
			if !drained && link.Up() && !isHeld() && link.Reconnects() == reconnects {
				// A change that left the link up and the connection the same: the server may
				// still have lost the consumer (or its store); re-creating it lets the next
				// pull find it, instead of waiting for missed heartbeats.
				if _, err := c.ensure(ctx); err != nil && ctx.Err() == nil {
					c.log.Warn("re-create consumer after reconnect", "consumer", c.Name(), "err", err)
				}
			}
		case <-ctx.Done():
			// Drain: Next returns what is buffered (handed back), then ErrMsgIteratorClosed.
			// Draining needs the server, so with the connection down the iterator is stopped.
			if link.Up() {
				it.Drain()
			} else {
				it.Stop()
			}
			select {
			case err := <-done:
				return err
			case <-time.After(drainWait):
			}
			it.Stop()
			handling.Lock()
			defer handling.Unlock()
			return nil
		}
	}
}

// Check reports, for /readyz, whether the consumer is running and exists on the server.
func (c *Consumer) Check(ctx context.Context) error {
	if !c.running.Load() {
		return fmt.Errorf("consumer %s is not running", c.Name())
	}
	if _, err := c.js.Consumer(ctx, c.spec.Stream, c.Name()); err != nil {
		return fmt.Errorf("consumer %s: %w", c.Name(), err)
	}
	return nil
}

// ensureStream creates the stream base of layout l with the configuration of StreamConfigs when
// it does not exist, and leaves an existing one as it is; created reports whether this call
// created it.
func ensureStream(ctx context.Context, js jetstream.JetStream, l Layout, base string) (created bool, err error) {
	name := l.Name(base)
	for _, cfg := range StreamConfigs(l) {
		if cfg.Name != name {
			continue
		}
		_, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, cfg)
			created = err == nil
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = nil // another process was quicker
			}
		}
		if err != nil {
			return false, fmt.Errorf("stream %s: %w", name, err)
		}
		return created, nil
	}
	return false, fmt.Errorf("stream %s is not one of Mailvet's", name)
}
