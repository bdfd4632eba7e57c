package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/loop"
)

// DefaultRetention is MAILVET_AUDIT_RETENTION's default: a year, long enough to look back at a
// year's sign-ins and key changes when investigating an incident (docs/operations.md).
const DefaultRetention = 8760 * time.Hour

// purgeBatch is how many events one purge statement deletes, and purgeTimeout its deadline: a
// request-path statement's default (database.QueryTimeout, a second) is too short for a thousand
// rows on a busy server.
const (
	purgeBatch   = 1000
	purgeTimeout = 30 * time.Second
)

// Purge deletes the events older than retention at now, in statements of batch rows, at most
// maxBatches of them, and returns how many it deleted. Each statement locks its rows with SKIP
// LOCKED, so replicas purging at the same moment share the rows instead of waiting on each other
// or deleting a row twice, and no statement holds locks for long (as the delivery log's
// retention, webhook.PurgeExpired).
func Purge(ctx context.Context, db database.DB, now time.Time, retention time.Duration, batch, maxBatches int) (int64, error) {
	if retention <= 0 || batch < 1 {
		return 0, fmt.Errorf("purge audit events: retention %s and batch %d must be positive", retention, batch)
	}
	before := now.Add(-retention)
	var total int64
	for range maxBatches {
		bctx, cancel := context.WithTimeout(ctx, purgeTimeout)
		tag, err := db.Exec(bctx, `
			DELETE FROM audit_events WHERE id IN (
				SELECT id FROM audit_events WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, batch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("purge audit events: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			break
		}
	}
	return total, nil
}

// Retention configures RunRetention.
type Retention struct {
	Keep  time.Duration    // MAILVET_AUDIT_RETENTION; 0 means DefaultRetention
	Every time.Duration    // how often to purge; 0 means an hour
	Now   func() time.Time // the clock; nil means time.Now (tests move a testclock)
	Log   *slog.Logger
}

// RunRetention purges events older than r.Keep every r.Every until ctx ends (loop.Every). Every
// API replica runs it; Purge's SKIP LOCKED makes that safe. A run deletes at most a hundred
// thousand rows; what is left waits for the next run.
func RunRetention(ctx context.Context, db database.DB, r Retention) error {
	keep, every, now, log := r.Keep, r.Every, r.Now, r.Log
	if keep <= 0 {
		keep = DefaultRetention
	}
	if every <= 0 {
		every = time.Hour
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return loop.Every(ctx, every, func(ctx context.Context) {
		n, err := Purge(ctx, db, now(), keep, purgeBatch, 100)
		if err != nil && ctx.Err() == nil {
			log.Warn("audit retention", "err", err)
		}
		if n > 0 {
			log.Info("audit retention removed events", "count", n, "older_than", keep)
		}
	})
}
