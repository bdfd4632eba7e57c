// Package privacy keeps customers' personal data the least time and lets them take it out or
// delete it (docs/personal-data.md): the retention of result snapshots and finished jobs, run by
// a loop every verifier worker shares; the deletion of an account; the export of its data; and
// the deletion of one address's stored results for a data-subject request.
package privacy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/loop"
)

// Retention is how long personal data is kept (docs/personal-data.md, "Retention").
type Retention struct {
	// Results: a verification's result snapshot in usage_log (the address and the full result),
	// kept as long as the customer sees the usage it belongs to (GET /v1/management/usage shows
	// 30 days). The row itself, with its domain and counts, stays for billing.
	// MAILVET_RESULT_RETENTION.
	Results time.Duration
	// Jobs: a finished asynchronous job's email, result, webhook URL (its path or query can carry
	// the receiver's token) and webhook secret. Its id, state and timestamps stay, so GET of the
	// job answers that it expired. MAILVET_JOB_RETENTION.
	Jobs time.Duration
}

// DefaultRetention is 30 days for both, the window of the usage report.
const DefaultRetention = 30 * 24 * time.Hour

// Defaults is the retention without configuration.
func Defaults() Retention { return Retention{Results: DefaultRetention, Jobs: DefaultRetention} }

// Purged counts what one retention run removed.
type Purged struct {
	Snapshots int64 // usage_log rows whose snapshot was cleared
	Jobs      int64 // finished jobs whose email, result, webhook URL and secret were cleared
	Leftovers int64 // rows of deleted accounts written by work in flight at the deletion
}

// batchTimeout bounds one retention statement. Without it a statement would get the pool's
// request-path deadline (database.QueryTimeout, one second), too short for a thousand rows on a
// busy server.
const batchTimeout = 30 * time.Second

// Purge applies r at now: it clears the snapshots of usage rows older than r.Results and the
// email, result, webhook URL and secret of jobs finished more than r.Jobs ago whose callback is
// no longer on its way, in batches of batch rows and at most maxBatches batches of each. Each batch is one
// statement that locks with SKIP LOCKED, so every replica can run Purge at once: they share the
// work and never wait for each other (as webhook.PurgeExpired does for deliveries). It also
// deletes what work in flight wrote for an account after its deletion (SweepDeleted).
func Purge(ctx context.Context, db database.DB, now time.Time, r Retention, batch, maxBatches int) (Purged, error) {
	var p Purged
	var err error
	if p.Snapshots, err = batches(ctx, maxBatches, batch, func(ctx context.Context) (int64, error) {
		tag, err := db.Exec(ctx, `UPDATE usage_log SET snapshot = NULL WHERE id IN (
			SELECT id FROM usage_log WHERE snapshot IS NOT NULL AND occurred_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, now.Add(-r.Results), batch)
		return tag.RowsAffected(), err
	}); err != nil {
		return p, fmt.Errorf("retention of result snapshots: %w", err)
	}
	// A job whose callback is still pending or retrying keeps its data: the delivery was signed
	// with its secret and a replay of the job's result must match what GET shows until then.
	if p.Jobs, err = batches(ctx, maxBatches, batch, func(ctx context.Context) (int64, error) {
		tag, err := db.Exec(ctx, `UPDATE jobs SET email = '', webhook_url = '', result = NULL, webhook_secret = NULL, expired_at = $2
			WHERE id IN (
				SELECT j.id FROM jobs j
				WHERE j.expired_at IS NULL AND j.state IN ('completed', 'failed') AND j.completed_at < $1
				  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.job_id = j.id AND d.state IN ('pending', 'retrying'))
				LIMIT $3 FOR UPDATE OF j SKIP LOCKED)`, now.Add(-r.Jobs), now, batch)
		return tag.RowsAffected(), err
	}); err != nil {
		return p, fmt.Errorf("retention of jobs: %w", err)
	}
	if p.Leftovers, err = SweepDeleted(ctx, db, now); err != nil {
		return p, err
	}
	return p, nil
}

// batches runs one batch at a time, each with its own deadline, until a batch does less than
// size rows or max batches ran (a negative max: no limit), and returns the rows they did.
func batches(ctx context.Context, max, size int, one func(context.Context) (int64, error)) (int64, error) {
	var total int64
	for i := 0; max < 0 || i < max; i++ {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		n, err := one(bctx)
		cancel()
		total += n
		if err != nil || n < int64(size) {
			return total, err
		}
	}
	return total, nil
}

// Retainer runs Purge every Interval on a worker (docs/personal-data.md, "Retention").
type Retainer struct {
	DB        database.DB
	Retention Retention
	Interval  time.Duration    // 0: 10 minutes
	Now       func() time.Time // nil: time.Now
	Log       *slog.Logger
}

// Run purges every Interval until ctx ends.
func (r *Retainer) Run(ctx context.Context) error {
	every, now, log := r.Interval, r.Now, r.Log
	if every <= 0 {
		every = 10 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return loop.Every(ctx, every, func(ctx context.Context) {
		p, err := Purge(ctx, r.DB, now(), r.Retention, 1000, 100)
		if err != nil && ctx.Err() == nil {
			log.Warn("personal data retention", "err", err)
		}
		if p != (Purged{}) {
			log.Info("personal data retention", "snapshots", p.Snapshots, "jobs", p.Jobs, "leftovers", p.Leftovers)
		}
	})
}
