package verifyworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/webhook"
)

// ListRunner verifies bulk-list chunks (docs/lists.md, "How a list runs"): it reads a chunk's
// unverified addresses from Postgres, verifies them together (one VerifyBatch, so addresses of
// a domain share MX look-ups, the catch-all probe and SMTP sessions), writes the results in one
// transaction and hands out the list's next chunk. A runner that dies mid-chunk leaves the
// message unacknowledged; another runner gets it after AckWait and verifies what is still
// unwritten, and the per-address writes make a second write of the same address impossible.
type ListRunner struct {
	store *list.Store
	js    jetstream.JetStream
	pipe  Pipeline
	log   *slog.Logger
	// Lag, when set, records how long each chunk waited in its stream (docs/operations.md).
	Lag *queuelag.Recorder

	// Concurrency is how many chunks this runner verifies at once.
	Concurrency int
	// AckWait is how long a chunk may go without a sign of life before another runner takes it;
	// the runner reports progress every AckWait/3 while it verifies.
	AckWait time.Duration
	// ChunkBudget bounds the verification of one chunk.
	ChunkBudget time.Duration
	// SweepEvery, StallAfter: running lists without progress for StallAfter have the chunks they
	// handed out published again (their messages were lost), queued lists are started, and
	// expired lists purged.
	SweepEvery, StallAfter time.Duration
	// MaxDeliveries is how often one chunk may fail before its list is given up as failed.
	MaxDeliveries uint64
	// Layout is the deployment's NATS layout (names, and the replication of a stream the runner
	// has to re-create); the zero Layout is unprefixed, one replica.
	Layout queue.Layout
	// PublicURL is the base of the results URL in completion callbacks.
	PublicURL string

	once sync.Once
	cons *queue.Consumer
}

// NewListRunner returns a runner with production defaults.
func NewListRunner(store *list.Store, js jetstream.JetStream, pipe Pipeline, log *slog.Logger) *ListRunner {
	return &ListRunner{store: store, js: js, pipe: pipe, log: log, Concurrency: 8, AckWait: 30 * time.Second,
		ChunkBudget: 3 * time.Minute, SweepEvery: 10 * time.Second, StallAfter: 2 * time.Minute, MaxDeliveries: 20}
}

// Run consumes chunks until ctx ends, then waits for the chunks in flight.
func (r *ListRunner) Run(ctx context.Context) error {
	return consumeConcurrently(ctx, r.consumer(), r.Concurrency, r.SweepEvery, r.sweep, func(m jetstream.Msg) {
		r.Lag.Took(queuelag.ConsumerListChunks, m)
		r.handle(m)
	})
}

func (r *ListRunner) consumer() *queue.Consumer {
	r.once.Do(func() {
		r.cons = queue.NewConsumer(r.js, queue.ListChunksConsumer(r.Concurrency, r.AckWait), r.Layout, r.Concurrency, r.log)
	})
	return r.cons
}

// Ready reports, for /readyz, whether the chunk consumer is running.
func (r *ListRunner) Ready(ctx context.Context) error { return r.consumer().Check(ctx) }

// handle runs one chunk message to its ack, or leaves it for a redelivery.
func (r *ListRunner) handle(msg jetstream.Msg) {
	var m queue.ChunkMessage
	if err := json.Unmarshal(msg.Data(), &m); err != nil {
		r.log.Warn("bad list chunk message", "err", err)
		_ = msg.Term() // nothing can ever parse it
		return
	}
	c := m
	if err := r.run(msg, c); err != nil {
		meta, _ := msg.Metadata()
		if meta != nil && meta.NumDelivered >= r.MaxDeliveries {
			r.log.Error("list chunk failed too often; failing its list", "list_id", c.ListID, "chunk", c.Chunk, "err", err)
			r.fail(c.ListID, fmt.Sprintf("chunk %d could not be verified: %v", c.Chunk, err))
			_ = msg.Term()
			return
		}
		r.log.Warn("list chunk", "list_id", c.ListID, "chunk", c.Chunk, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// run verifies and writes one chunk, then publishes what the write handed out. The ack comes
// after the publish: a runner that dies in between leaves a chunk that is redelivered, finds
// nothing left to verify and is acknowledged, where the other order could lose the next chunk
// until the sweep finds the list stalled.
func (r *ListRunner) run(msg jetstream.Msg, c list.Chunk) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.ChunkBudget)
	defer cancel()
	w, err := r.store.Work(ctx, c)
	switch {
	case errors.Is(err, list.ErrNotFound):
		return nil // deleted: nothing to do
	case err != nil:
		return err
	case w.State != list.Running || len(w.Addresses) == 0:
		return nil // canceled, finished, or this chunk is written already
	}
	stop := every(r.AckWait/3, func() { _ = msg.InProgress() })
	results, err := r.verify(ctx, w.Addresses)
	stop()
	if err != nil {
		return err
	}
	out, err := r.store.Write(ctx, c, w, results, r.PublicURL)
	if err != nil {
		return err
	}
	r.publish(ctx, out)
	return nil
}

// verify runs the pipeline on the chunk's addresses, turning a panic into an error so that one
// bad chunk does not take the worker down.
func (r *ListRunner) verify(ctx context.Context, addrs []list.Address) (res []verify.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic verifying chunk: %v", p)
		}
	}()
	emails := make([]string, len(addrs))
	for i, a := range addrs {
		emails[i] = a.Email
	}
	return r.pipe.VerifyBatch(ctx, emails, nil), nil
}

// publish queues what a write handed out. A failed publish is logged, not retried: the list is
// left without progress, and the sweep publishes its chunks again after StallAfter; a delivery
// left unpublished is published by the webhook workers' outbox sweep.
func (r *ListRunner) publish(ctx context.Context, out list.Written) {
	if len(out.Next) > 0 {
		if err := queue.PublishChunks(ctx, r.js, r.Layout, 2*time.Second, out.Next, nil); err != nil {
			r.log.Warn("publish list chunks", "err", err)
		}
	}
	if out.Delivery != nil {
		if err := webhook.Publish(ctx, r.js, r.Layout, *out.Delivery); err != nil {
			r.log.Warn("publish list callback", "delivery_id", *out.Delivery, "err", err)
		}
	}
}

func (r *ListRunner) fail(id uuid.UUID, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.store.Fail(ctx, id, reason, r.PublicURL)
	if err != nil {
		r.log.Error("fail list", "list_id", id, "err", err)
		return
	}
	r.publish(ctx, out)
}

// sweep starts queued lists, re-publishes the chunks of stalled ones, and purges expired lists.
// Every replica may run it: the chunks it publishes carry the same message ids from every
// replica, and purging is idempotent.
func (r *ListRunner) sweep(ctx context.Context) {
	chunks, rounds, err := r.store.Stalled(ctx, r.StallAfter, 100)
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
