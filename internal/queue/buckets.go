package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// Key-value buckets the verifier fleet shares (docs/fleet.md). Like the streams, they are named
// here by their base names and created only through BucketConfigs, so that the Layout's prefix
// and replication apply to them as to everything else.
const (
	// BucketSMTPSlots holds the fleet's SMTP session leases: one key per taken slot of an MX
	// address, "<address>.<slot>", and "<address>.want" for a worker waiting for one. A key lives
	// SlotLeaseTTL after its last write, so the slots of a worker that died without releasing
	// them come back by themselves.
	BucketSMTPSlots = "SMTP_SLOTS"
	// BucketMX holds MX look-up answers by domain, as internal/verify/mx encodes them.
	BucketMX = "MX_CACHE"
	// BucketCatchAll holds catch-all answers by domain, as internal/verify/smtp encodes them.
	BucketCatchAll = "CATCHALL_CACHE"
)

// SlotLeaseTTL is how long an SMTP session lease outlives its last renewal. Holders renew every
// third of it; a worker killed with its sessions open gives its slots back within it.
const SlotLeaseTTL = 15 * time.Second

// KnowledgeTTL bounds what the fleet remembers about a domain: the longest of the MX and
// catch-all cache lifetimes (6 hours). Shorter-lived answers carry their own expiry in the value.
const KnowledgeTTL = 6 * time.Hour

// BucketConfigs returns the fleet's buckets in layout l. Every bucket keeps one revision per key
// on disk, with l's replicas copies, so leases and answers survive a NATS restart. leaseTTL, when
// positive, replaces SlotLeaseTTL (tests shorten it).
func BucketConfigs(l Layout, leaseTTL time.Duration) []jetstream.KeyValueConfig {
	if leaseTTL <= 0 {
		leaseTTL = SlotLeaseTTL
	}
	return []jetstream.KeyValueConfig{
		{
			Bucket:      l.Name(BucketSMTPSlots),
			Description: "SMTP session leases per MX address, shared by the verifier fleet",
			History:     1,
			TTL:         leaseTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    l.replicas(),
		},
		{
			Bucket:      l.Name(BucketMX),
			Description: "MX look-up answers by domain, shared by the verifier fleet",
			History:     1,
			TTL:         KnowledgeTTL,
			Storage:     jetstream.FileStorage,
			MaxBytes:    256 << 20,
			Replicas:    l.replicas(),
		},
		{
			Bucket:      l.Name(BucketCatchAll),
			Description: "catch-all answers by domain, shared by the verifier fleet",
			History:     1,
			TTL:         KnowledgeTTL,
			Storage:     jetstream.FileStorage,
			MaxBytes:    64 << 20,
			Replicas:    l.replicas(),
		},
	}
}

// EnsureBucket creates or updates the bucket base of layout l and returns it. A cluster that has
// just formed answers "unavailable" until it has a JetStream leader, so errors are retried with
// backoff, and logged, until ctx ends; one that waiting cannot cure (permanent) ends it at once.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, l Layout, base string, leaseTTL time.Duration, log *slog.Logger) (jetstream.KeyValue, error) {
	name := l.Name(base)
	var cfg *jetstream.KeyValueConfig
	for _, c := range BucketConfigs(l, leaseTTL) {
		if c.Bucket == name {
			cfg = &c
		}
	}
	if cfg == nil {
		return nil, fmt.Errorf("no bucket %q in the layout", base)
	}
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	var kv jetstream.KeyValue
	err := backoff.RetryNotify(func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		kv, err = js.CreateOrUpdateKeyValue(cctx, *cfg)
		return permanent(err, l)
	}, backoff.WithContext(policy, ctx), func(err error, next time.Duration) {
		if log != nil {
			log.Warn("waiting for JetStream to create a bucket", "bucket", name, "retry_in", next, "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", name, stopped(ctx, err))
	}
	return kv, nil
}
