package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/mailvet/mailvet/internal/database"
)

// sweepBatch is how many rows one statement of Sweep deletes; sweepBatches bounds one run.
const (
	sweepBatch   = 1000
	sweepBatches = 100
)

// sweepTimeout bounds one statement of Sweep (the pool's request-path deadline is too short for
// a thousand rows on a busy server).
const sweepTimeout = 30 * time.Second

// Sweep deletes, at now, what the dashboard keeps only for a while once that while is over
// (docs/personal-data.md, "Where it is stored"): the sign-in throttle's counters a day after
// their subject's last attempt (clearOld's rule; one kind holds a client address in the clear),
// expired sessions (their lifetime or their idle time over) and mailed links, and upload tokens older than a day. The pages clear some
// of them on the way, but only when someone signs in or uploads; every API replica runs Sweep
// periodically, so nothing waits for that. Each statement locks with SKIP LOCKED, so replicas
// running it at once share the rows. It returns how many rows it deleted.
func Sweep(ctx context.Context, db database.DB, now time.Time) (int64, error) {
	var total int64
	forgotten := now.Add(-max(forgetFailures, signupWindow))
	for _, q := range []struct {
		what, sql string
		before    time.Time
	}{
		{"sign-in counters", `DELETE FROM dashboard_signin_failures WHERE subject IN (
			SELECT subject FROM dashboard_signin_failures WHERE window_start < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, forgotten},
		{"sessions", `DELETE FROM dashboard_sessions WHERE token_hash IN (
			SELECT token_hash FROM dashboard_sessions WHERE expires_at < $1 OR idle_until < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, now},
		{"mailed links", `DELETE FROM dashboard_email_tokens WHERE token_hash IN (
			SELECT token_hash FROM dashboard_email_tokens WHERE expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, now},
		{"upload tokens", `DELETE FROM dashboard_upload_tokens WHERE (account_id, token_hash) IN (
			SELECT account_id, token_hash FROM dashboard_upload_tokens WHERE created_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, now.Add(-24 * time.Hour)},
	} {
		for range sweepBatches {
			sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			tag, err := db.Exec(sctx, q.sql, q.before, sweepBatch)
			cancel()
			if err != nil {
				return total, fmt.Errorf("dashboard sweep: %s: %w", q.what, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < sweepBatch {
				break
			}
		}
	}
	return total, nil
}
