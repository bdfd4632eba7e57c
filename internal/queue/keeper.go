package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keeper keeps Mailvet's streams in existence for as long as the process runs.
//
// Why: the VERIFY stream lives in memory, and a NATS server that restarts (or a cluster that
// loses the only replica's store) comes back without it. Nothing in JetStream recreates a
// stream by itself, so every process checks, after each reconnect and every Interval, that
// each stream is there, and creates the missing ones with the configuration of StreamConfigs.
// Creating is idempotent, so every replica of every tier may do it. See docs/reliability.md.
type Keeper struct {
	js     jetstream.JetStream
	link   *Link
	layout Layout
	log    *slog.Logger
	// Interval between checks while nothing happens.
	Interval time.Duration

	mu   sync.Mutex // one check at a time
	kick chan struct{}
}

// NewKeeper returns a keeper of StreamConfigs(l) on js, watching link for reconnects.
func NewKeeper(js jetstream.JetStream, link *Link, l Layout, log *slog.Logger) *Keeper {
	return &Keeper{js: js, link: link, layout: l, log: log, Interval: 5 * time.Second, kick: make(chan struct{}, 1)}
}

// Run checks the streams after every reconnect, when kicked, and every Interval, until ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		changed := k.link.Changed()
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			if !k.link.Up() {
				continue
			}
		case <-k.kick:
		case <-t.C:
		}
		if !k.link.Up() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := k.Ensure(cctx); err != nil && ctx.Err() == nil {
			k.log.Warn("streams missing and not re-created yet", "err", err)
		}
		cancel()
	}
}

// Kick asks Run for a check now, without waiting for it: a publish found a stream missing.
func (k *Keeper) Kick() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Ensure creates every stream that does not exist. Streams that exist are left as they are:
// their configuration is brought up to date at start-up (EnsureStreams), not on every check.
func (k *Keeper) Ensure(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, cfg := range baseStreams(1) {
		created, err := ensureStream(ctx, k.js, k.layout, cfg.Name)
		if err != nil {
			errs = append(errs, err)
		} else if created {
			k.log.Info("stream re-created", "stream", k.layout.Name(cfg.Name))
		}
	}
	return errors.Join(errs...)
}

// Check reports, for /readyz, whether every stream exists right now.
func (k *Keeper) Check(ctx context.Context) error {
	if !k.link.Up() {
		return errors.New("not connected to NATS")
	}
	for _, cfg := range StreamConfigs(k.layout) {
		if _, err := k.js.Stream(ctx, cfg.Name); err != nil {
			k.Kick()
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}
