package usage

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A reservation holds the emails of a paid request whose results are recorded after admission (a
// batch, a stream, an async job) under the account's hard spend cap, from its admission until its
// results are recorded or it ends, so that requests running at the same time cannot together pass
// the cap (docs/api.md, "Metering"). Admission makes it (Request.Reservation), Record with the
// decision takes recorded emails off it, and Charge.Close releases the rest. A replica that dies
// cannot release its reservations; the sweep of every replica does (ReleaseStale).

// ReservationMaxAge is how long a reservation may stay open before the sweep releases it whoever
// holds it: far longer than any request runs (a stream's 120 s deadline, then shutdown), so only a
// reservation whose release was lost (its replica cut off from Postgres for minutes, or a ledger
// without holds that died) is taken.
const ReservationMaxAge = 10 * time.Minute

// releaseSQL closes reservation $1: its emails not recorded leave the month's reserved count.
const releaseSQL = `WITH del AS (
		DELETE FROM usage_reservations WHERE id = $1 RETURNING account_id, month, emails
	)
	UPDATE usage_monthly m SET reserved = greatest(0, m.reserved - del.emails)
	FROM del WHERE m.account_id = del.account_id AND m.month = del.month`

// Release closes reservation id; releasing one that is already closed does nothing.
func Release(ctx context.Context, db DB, id uuid.UUID) error {
	if id == uuid.Nil {
		return nil
	}
	_, err := db.Exec(ctx, releaseSQL, id)
	return err
}

// staleReservationsSQL finds reservations whose request cannot release them any more: held by a
// replica whose heartbeat has lapsed, or by one with no heartbeat row and older than the grace
// (as heldOfDeadSQL), or older than ReservationMaxAge whoever holds them ($2).
const staleReservationsSQL = `SELECT v.id FROM usage_reservations v
	LEFT JOIN api_replicas r ON r.id = v.held_by
	WHERE (v.held_by IS NOT NULL AND (r.alive_until < now() OR (r.id IS NULL AND v.created_at < now() - $1::interval)))
		OR v.created_at < now() - $2::interval
	ORDER BY v.created_at LIMIT $3`

// ReleaseStale releases, in bounded number, the reservations of dead replicas and those open
// longer than ReservationMaxAge, one statement each (two sweeps may release the same one: the
// second finds it gone). It returns how many it released.
func ReleaseStale(ctx context.Context, db DB, grace time.Duration) (int, error) {
	rows, err := db.Query(ctx, staleReservationsSQL, grace, ReservationMaxAge, sweepBatch)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	for i, id := range ids {
		if err := Release(ctx, db, id); err != nil {
			return i, err
		}
	}
	return len(ids), nil
}
