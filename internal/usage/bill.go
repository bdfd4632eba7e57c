package usage

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Row is one usage-log row: a delivered result, or a request that was refused.
type Row struct {
	// ItemKey makes billing idempotent: an item with a key already logged is skipped and not
	// counted again. Use the request id plus the item's index, "job:"+job id, or the list's.
	ItemKey     string
	AccountID   string
	KeyID       string // empty when not known
	OccurredAt  time.Time
	Route       string
	EmailDomain string
	Status      string
	FailedCheck string
	// ErrorClass is null for successful verifications and otherwise the response's error code
	// (rate_limit for rate_limit_exceeded; docs/errors.md).
	ErrorClass string
	// Billable: the email passed layer 1 (docs/api.md, "Metering").
	Billable bool
	// QuotaUnit: the email entered verification; on the free tier it counts toward the monthly
	// quota (docs/api.md, "Metering").
	QuotaUnit bool
	Snapshot  []byte // JSON; nil for none
}

// Bill writes the usage rows of delivered results against hold, in one statement
// (sql/bill.sql): rows whose item key is logged already are skipped, and each row written moves
// one unit of the hold from held to billed. With release, the hold ends there and the rest of its
// units go back. A list's chunk and a job's end call it inside their own transaction; a Ledger
// calls it behind the responses of the API's requests. The zero hold writes rows that count
// nothing (a refused request's).
func Bill(ctx context.Context, db DB, hold uuid.UUID, rows []Row, release bool) error {
	if len(rows) == 0 && !release {
		return nil
	}
	_, err := db.Exec(ctx, billSQL, billArgs([]bill{{hold: hold, rows: rows, release: release}})...)
	return err
}

// billArgs are the arguments of sql/bill.sql for bills of distinct holds: the rows' columns, each
// row's hold, and the holds with their releases. The zero hold is no hold.
func billArgs(bills []bill) []any {
	var (
		rows     []Row
		rowHold  []*uuid.UUID
		holds    = make([]uuid.UUID, 0, len(bills))
		releases = make([]bool, 0, len(bills))
	)
	for _, b := range bills {
		var h *uuid.UUID
		if b.hold != uuid.Nil {
			id := b.hold
			h = &id
			holds, releases = append(holds, b.hold), append(releases, b.release)
		}
		for _, r := range b.rows {
			rows = append(rows, r)
			rowHold = append(rowHold, h)
		}
	}
	return append(columns(rows), rowHold, holds, releases)
}

// Adopt hands hold over to the asynchronous job of the same id: it no longer expires, and the
// job's end bills and releases it (Bill). The API adopts the hold once the job is stored.
func Adopt(ctx context.Context, db DB, hold uuid.UUID) error {
	_, err := db.Exec(ctx, adoptSQL, hold)
	return err
}

// expireBatch bounds the holds one Expire statement deletes, so that it holds its locks briefly.
const expireBatch = 500

// Expire is the only sweep: it deletes the holds whose lifetime has passed (their replica died, or
// could not reach Postgres, before releasing them) and gives their units back, in bounded
// batches. Any replica may run it at any time. It returns how many holds it ended.
func Expire(ctx context.Context, db DB) (int, error) {
	total := 0
	for {
		rows, err := db.Query(ctx, expireSQL, expireBatch)
		if err != nil {
			return total, err
		}
		n := 0
		for rows.Next() {
			var holds int
			if err := rows.Scan(&holds); err != nil {
				rows.Close()
				return total, err
			}
			n += holds
		}
		if err := rows.Err(); err != nil {
			return total, err
		}
		total += n
		if n < expireBatch {
			return total, nil
		}
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullableJSON is a jsonb argument: nil (SQL null) for no document.
func nullableJSON(doc []byte) *string {
	if doc == nil {
		return nil
	}
	return nullable(string(doc))
}

// columns turns rows into one array per column, for unnest: one statement writes any number of
// rows.
func columns(rows []Row) []any {
	n := len(rows)
	var (
		accounts, items, routes                  = make([]string, n), make([]string, n), make([]string, n)
		keys, domains, statuses, checks, classes = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		snaps                                    = make([]*string, n)
		times                                    = make([]time.Time, n)
		billable, quotaBit                       = make([]bool, n), make([]bool, n)
	)
	for i, r := range rows {
		accounts[i], items[i], routes[i] = r.AccountID, r.ItemKey, r.Route
		keys[i], domains[i], statuses[i] = nullable(r.KeyID), nullable(r.EmailDomain), nullable(r.Status)
		checks[i], classes[i] = nullable(r.FailedCheck), nullable(r.ErrorClass)
		snaps[i] = nullableJSON(r.Snapshot)
		times[i] = r.OccurredAt
		if times[i].IsZero() {
			times[i] = time.Now()
		}
		billable[i], quotaBit[i] = r.Billable, r.QuotaUnit
	}
	return []any{accounts, keys, items, times, routes, domains, statuses, checks, classes, billable, quotaBit, snaps}
}
