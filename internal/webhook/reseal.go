package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/sealed"
)

// sealedColumns are the tables whose webhook_secret column holds sealed secrets (migration
// 00023). Each has a uuid primary key id.
var sealedColumns = []string{"jobs", "lists", "deliveries"}

// resealTimeout bounds one batch's transaction.
const resealTimeout = 30 * time.Second

// Reseal seals again under the current key, at most batch rows per table, the webhook secrets
// that are not sealed under it: those under the old key (MAILVET_SECRETS_KEY_OLD) during a
// rotation, and plain ones stored before secrets were sealed. It returns how many it re-sealed.
// Values under a key this process does not hold are never selected, so they cannot hold up the
// batches; they stay unreadable until a process with that key reseals them.
//
// Rows are claimed FOR UPDATE SKIP LOCKED in one transaction per table, like the outbox sweep and
// retention, so webhook-worker replicas running it at once split the work, and a row updated
// meanwhile (a job finishing, a delivery delivered) is either waited for by nobody or re-read
// under its lock: the UPDATE only writes where the value is still the one opened.
func Reseal(ctx context.Context, db DB, keys *sealed.Keys, batch int) (int, error) {
	total := 0
	for _, table := range sealedColumns {
		n, err := resealTable(ctx, db, keys, table, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("reseal %s: %w", table, err)
		}
	}
	return total, nil
}

func resealTable(ctx context.Context, db DB, keys *sealed.Keys, table string, batch int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, resealTimeout)
	defer cancel()
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Key ids are hex digits and the prefix holds no LIKE wildcard, so the patterns need no escaping.
	oldPattern := "-" // matches nothing: no old key
	if id := keys.OldID(); id != "" {
		oldPattern = sealed.Prefix + id + ":%"
	}
	rows, err := tx.Query(ctx, `
		SELECT id, webhook_secret FROM `+table+`
		WHERE webhook_secret IS NOT NULL
		  AND (webhook_secret NOT LIKE $1 OR webhook_secret LIKE $2)
		LIMIT $3
		FOR UPDATE SKIP LOCKED`, sealed.Prefix+"%", oldPattern, batch)
	if err != nil {
		return 0, err
	}
	type row struct {
		id     uuid.UUID
		secret string
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.secret)
		return x, err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range found {
		plain, err := keys.Open(x.secret)
		if errors.Is(err, sealed.ErrCorrupt) {
			// Altered or truncated: re-sealing would launder it. Left as it is; its delivery
			// fails to sign and says so.
			continue
		}
		if err != nil {
			return n, err
		}
		v, err := keys.Seal(plain)
		if err != nil {
			return n, err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+table+` SET webhook_secret = $2 WHERE id = $1`, x.id, v); err != nil {
			return n, err
		}
		n++
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return n, nil
}

// RunReseal re-seals, every ResealInterval until ctx ends, what Reseal finds: after a key
// rotation the old key's values are gone within a few intervals, and then
// MAILVET_SECRETS_KEY_OLD can be removed (docs/operations.md, "Rotating the secrets key").
func (w *Worker) RunReseal(ctx context.Context) error {
	return loop.Every(ctx, w.o.ResealInterval, func(ctx context.Context) {
		for ctx.Err() == nil {
			n, err := Reseal(ctx, w.db, w.o.Secrets, resealBatch)
			if err != nil && ctx.Err() == nil {
				w.log.Warn("webhook secrets reseal", "err", err)
				return
			}
			if n > 0 {
				w.log.Info("webhook secrets resealed under the current key", "count", n, "key_id", w.o.Secrets.CurrentID())
			}
			if n < resealBatch {
				return
			}
		}
	})
}

// resealBatch is how many rows of a table one Reseal transaction takes.
const resealBatch = 500
