// Package fleet is what the verifier workers of one deployment share over NATS JetStream
// key-value buckets (docs/fleet.md): the SMTP session slots of every MX address, so that
// MAILVET_SMTP_MAX_PER_HOST bounds the whole fleet's sessions to a mail server rather than each
// worker's, and what the workers have learnt about domains — MX answers and catch-all answers —
// so that a domain one worker has looked up or probed is not looked up or probed again by the
// others while the answer lasts.
//
// The buckets are created by internal/queue (buckets.go), which applies the deployment's prefix
// and replication. Nothing here is on the per-RCPT path: a slot is taken once per session, and a
// domain is asked about once per worker per cache lifetime.
package fleet

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/queue"
)

// Options tune a Fleet.
type Options struct {
	// LeaseTTL is how long a session slot outlives its holder's last renewal; 0 means
	// queue.SlotLeaseTTL. Tests shorten it.
	LeaseTTL time.Duration
	Log      *slog.Logger
	// Metrics, when set, registers the slots' counters (docs/operations.md).
	Metrics prometheus.Registerer
}

// Fleet is one worker's handle on what the fleet shares.
type Fleet struct {
	// Slots is the fleet-wide session cap (smtp.Slots).
	Slots *Slots
	// MX and CatchAll are the shared caches of MX answers (mx.Shared) and catch-all answers
	// (smtp.Shared).
	MX, CatchAll *Cache
}

// New creates the fleet's buckets in layout l where they do not exist, waiting for JetStream as
// EnsureStreams does, and returns the worker's handle. Close stops its lease renewals.
func New(ctx context.Context, js jetstream.JetStream, l queue.Layout, opts Options) (*Fleet, error) {
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = queue.SlotLeaseTTL
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	var bs []*bucket
	for _, base := range []string{queue.BucketSMTPSlots, queue.BucketMX, queue.BucketCatchAll} {
		kv, err := queue.EnsureBucket(ctx, js, l, base, opts.LeaseTTL, opts.Log)
		if err != nil {
			return nil, err
		}
		bs = append(bs, &bucket{js: js, layout: l, base: base, ttl: opts.LeaseTTL, log: opts.Log, kv: kv})
	}
	return &Fleet{Slots: newSlots(bs[0], opts.LeaseTTL, opts.Metrics), MX: newCache(bs[1]), CatchAll: newCache(bs[2])}, nil
}

// Close stops watching the bucket and renewing leases, then gives back the slots still held,
// within half a second however NATS is doing. A session still open on one of them retires after
// its exchange, so the prober should be closed first; the keys not deleted expire within the TTL.
func (f *Fleet) Close() { f.Slots.close() }

// bucket is one key-value bucket, re-created when NATS has lost it (a server that restarted
// without its store), as queue.Keeper does for the streams.
type bucket struct {
	js     jetstream.JetStream
	layout queue.Layout
	base   string
	ttl    time.Duration
	log    *slog.Logger
	kv     jetstream.KeyValue

	mu       sync.Mutex
	lastHeal time.Time
}

// healEvery bounds how often a missing bucket is re-created.
const healEvery = time.Second

// heal re-creates the bucket, in the background and at most once per healEvery, when err says it
// is missing, or may be: an operation on a lost bucket seldom says so within its budget. A write
// meets "no responders" and nats.go retries it (2 × 250 ms) past a slot's 500 ms; a read from a
// lost bucket waits out its 100–200 ms. So a deadline sends a look at the bucket first, and only
// a bucket JetStream says is not there is re-created. Until then its operations fail like an
// unreachable NATS.
func (b *bucket) heal(err error) {
	maybe := errors.Is(err, context.DeadlineExceeded)
	if !maybe && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) &&
		!errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		return
	}
	b.mu.Lock()
	if time.Since(b.lastHeal) < healEvery {
		b.mu.Unlock()
		return
	}
	b.lastHeal = time.Now()
	b.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if maybe {
			if _, err := b.js.KeyValue(ctx, b.layout.Name(b.base)); !errors.Is(err, jetstream.ErrBucketNotFound) {
				return // it is there (the deadline was a slow NATS), or NATS cannot say
			}
		}
		for _, cfg := range queue.BucketConfigs(b.layout, b.ttl) {
			if cfg.Bucket != b.layout.Name(b.base) {
				continue
			}
			if _, err := b.js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
				b.log.Warn("fleet bucket missing and not re-created yet", "bucket", cfg.Bucket, "err", err)
			} else {
				b.log.Info("fleet bucket re-created", "bucket", cfg.Bucket)
			}
		}
	}()
}

// validKey is what a key-value key may look like; domains and encoded addresses always do, but
// a key that does not is simply not shared.
var validKey = regexp.MustCompile(`^[-_=a-zA-Z0-9]+(\.[-_=a-zA-Z0-9]+)*$`)
