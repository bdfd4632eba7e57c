package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/keyset"
	"github.com/mailvet/mailvet/internal/listlive"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
)

// Errors for the API's error table.
var (
	// ErrDeliveryNotFound: no such delivery for this account (another account's delivery is
	// reported the same way, so ids of other accounts cannot be probed).
	ErrDeliveryNotFound = errors.New("delivery not found")
	// ErrNotReplayable: only failed deliveries can be replayed.
	ErrNotReplayable = errors.New("only a failed delivery can be replayed")
	// ErrInvalidFilter: a ListFilter with an unknown status or a cursor this package did not issue.
	ErrInvalidFilter = errors.New("invalid delivery filter")
	// ErrReplayNeedsPaidPlan: the free tier cannot replay deliveries (docs/api.md, "Delivery log
	// and replays").
	ErrReplayNeedsPaidPlan = errors.New("retrying deliveries is available on paid plans")
)

// ReplayAllowed says whether an account of tier may replay failed deliveries: paid tiers only.
// The management API and the dashboard both ask it, so the rule lives in one place.
func ReplayAllowed(tier plan.Tier) error {
	if tier == plan.Free {
		return ErrReplayNeedsPaidPlan
	}
	return nil
}

// Page sizes of ListDeliveries.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// Attempt is one row of the delivery log.
type Attempt struct {
	Attempt      int       `json:"attempt"`
	StartedAt    time.Time `json:"started_at"`
	DurationMs   int       `json:"duration_ms"`
	HTTPStatus   *int      `json:"http_status"`
	Error        *string   `json:"error"`
	ResponseBody *string   `json:"response_body"`
}

// Delivery is a delivery as the dashboard shows it. The body and signature are not included:
// the body is the job's result, served by the jobs route, and the signature is a secret's MAC.
type Delivery struct {
	ID         uuid.UUID  `json:"id"`
	JobID      *uuid.UUID `json:"job_id"`  // the job whose result this delivers, or null
	ListID     *uuid.UUID `json:"list_id"` // the bulk list whose completion this announces, or null
	URL        string     `json:"url"`
	State      string     `json:"state"`
	Signed     bool       `json:"signed"`
	Attempts   int        `json:"attempts"`
	LastStatus *int       `json:"last_status"`
	LastError  *string    `json:"last_error"`
	ReplayOf   *uuid.UUID `json:"replay_of"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Log        []Attempt  `json:"attempt_log"`
}

// ListFilter selects a page of an account's deliveries.
type ListFilter struct {
	Status string // "", pending, retrying, delivered or failed
	Limit  int    // 1–MaxPageSize; 0 means DefaultPageSize
	Cursor string // NextCursor of the previous page; "" for the first
}

// Page is one page of deliveries, newest first. NextCursor is empty on the last page.
type Page struct {
	Deliveries []Delivery `json:"deliveries"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// ListDeliveries returns a page of an account's deliveries, newest first, each with its attempts.
func ListDeliveries(ctx context.Context, db DB, accountID uuid.UUID, f ListFilter) (Page, error) {
	switch f.Status {
	case "", StatePending, StateRetrying, StateDelivered, StateFailed:
	default:
		return Page{}, fmt.Errorf("%w: unknown status %q", ErrInvalidFilter, f.Status)
	}
	pg, err := keyset.Parse(f.Limit, DefaultPageSize, MaxPageSize, f.Cursor)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrInvalidFilter, err)
	}
	// One row more than the page tells whether another page follows.
	rows, err := db.Query(ctx, `
		SELECT id, job_id, list_id, url, state, signature IS NOT NULL OR webhook_secret IS NOT NULL, attempts, last_status, last_error,
		       replay_of, created_at, finished_at
		FROM deliveries
		WHERE account_id = $1 AND `+listlive.OfLive("deliveries.list_id")+`
		  AND ($2::text = '' OR state = $2)
		  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::uuid))
		ORDER BY created_at DESC, id DESC
		LIMIT $5`, accountID, f.Status, pg.AfterAt, pg.AfterID, pg.Size+1)
	if err != nil {
		return Page{}, fmt.Errorf("list deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := r.Scan(&d.ID, &d.JobID, &d.ListID, &d.URL, &d.State, &d.Signed, &d.Attempts, &d.LastStatus,
			&d.LastError, &d.ReplayOf, &d.CreatedAt, &d.FinishedAt)
		d.Log = []Attempt{}
		return d, err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list deliveries: %w", err)
	}
	var page Page
	page.Deliveries, page.NextCursor = keyset.Cut(ds, pg.Size, func(d Delivery) keyset.Cursor { return keyset.Cursor{At: d.CreatedAt, ID: d.ID} })
	if len(page.Deliveries) == 0 {
		return page, nil
	}
	ids := make([]uuid.UUID, len(page.Deliveries))
	index := make(map[uuid.UUID]int, len(ids))
	for i, d := range page.Deliveries {
		ids[i], index[d.ID] = d.ID, i
	}
	// The latest attempt of an unfinished delivery whose lease (next_attempt_at, set by claim)
	// still runs is under way: its row says interruptedError only so that a crash leaves it
	// counted, and is shown as in progress until the lease ends.
	rows, err = db.Query(ctx, `
		SELECT a.delivery_id, a.attempt, a.started_at, a.duration_ms, a.http_status,
		       CASE WHEN a.error = $2 AND a.attempt = d.attempts AND d.state IN ('pending', 'retrying')
		                 AND d.next_attempt_at > now()
		            THEN $3 ELSE a.error END,
		       a.response_body
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE a.delivery_id = ANY($1) ORDER BY a.delivery_id, a.attempt`, ids, interruptedError, inProgressText)
	if err != nil {
		return Page{}, fmt.Errorf("list delivery attempts: %w", err)
	}
	var id uuid.UUID
	var a Attempt
	_, err = pgx.ForEachRow(rows, []any{&id, &a.Attempt, &a.StartedAt, &a.DurationMs, &a.HTTPStatus, &a.Error, &a.ResponseBody}, func() error {
		d := &page.Deliveries[index[id]]
		d.Log = append(d.Log, a)
		return nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("list delivery attempts: %w", err)
	}
	return page, nil
}

// Replay delivers a failed delivery of accountID again: a new delivery with replay_of set to the
// original, the same URL, the same body bytes and the same (sealed) secret, so the same
// X-Service-Signature and a fresh Standard Webhooks signature, published at once. It returns the
// replay's id.
//
// A request that arrives twice must not deliver twice, so an original has at most one replay
// that is not failed (a unique index enforces it across API replicas): while one is pending,
// retrying or delivered, Replay returns that one's id instead of creating another. Only after
// every earlier replay failed does a new request create a new replay. Replaying a replay replays
// its original. Callers check the tier first with ReplayAllowed.
//
// A replay sends the account's data to a URL again, so a new one is never made without its
// delivery_replayed event: by (who asked, with its Kind, actor and client) is written with the
// replay's row, its Detail set here to name the delivery and the receiver, by receiverOf
// (docs/security.md, "Audit log"). A repeated request that gets the replay already made writes
// none: it sends nothing new.
func Replay(ctx context.Context, db DB, js jetstream.JetStream, l queue.Layout, accountID, deliveryID uuid.UUID, by audit.Event) (uuid.UUID, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	var state string
	var root uuid.UUID
	err = tx.QueryRow(ctx, `
		SELECT state, COALESCE(replay_of, id) FROM deliveries WHERE id = $1 AND account_id = $2 AND `+listlive.OfLive("deliveries.list_id"),
		deliveryID, accountID).Scan(&state, &root)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrDeliveryNotFound
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("replay: %w", err)
	}
	if state != StateFailed {
		return uuid.Nil, ErrNotReplayable
	}
	newID, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, err
	}
	// The copy is taken from the delivery asked for; its body and secret are the original's.
	var (
		id       uuid.UUID
		callback string
	)
	err = tx.QueryRow(ctx, `
		INSERT INTO deliveries (id, job_id, list_id, account_id, url, body, signature, webhook_secret, replay_of)
		SELECT $1, job_id, list_id, account_id, url, body, signature, webhook_secret, $3
		FROM deliveries WHERE id = $2
		ON CONFLICT (replay_of) WHERE replay_of IS NOT NULL AND state <> 'failed' DO NOTHING
		RETURNING id, url`, newID, deliveryID, root).Scan(&id, &callback)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = tx.QueryRow(ctx, `
			SELECT id FROM deliveries WHERE replay_of = $1 AND state <> 'failed'`, root).Scan(&id)
	case err == nil:
		by.Detail = fmt.Sprintf("delivery %s replayed to %s", deliveryID, receiverOf(callback))
		err = audit.Record(ctx, tx, by)
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("replay: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return uuid.Nil, fmt.Errorf("replay: %w", err)
	}
	// Publishing the existing replay again is harmless (deduplicated, or a no-op for a finished
	// delivery) and covers a first request that died between its commit and its publish. If
	// publishing fails, the outbox sweep picks the row up.
	if err := Publish(ctx, js, l, id); err != nil {
		return id, err
	}
	return id, nil
}

// receiverOf is what the audit log keeps of callback URL raw: its scheme, host and port. The
// user part, path, query and fragment can each carry the receiver's token, and the audit log
// keeps its events for a year, far longer than the delivery log keeps the URL
// (docs/personal-data.md, "Where it is stored").
func receiverOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a URL that does not parse)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// Retention of the delivery log by tier (docs/api.md, "Delivery log and replays").
const (
	RetentionFree = 24 * time.Hour
	RetentionPaid = 30 * 24 * time.Hour
)

// PurgeExpired deletes finished deliveries (and, by cascade, their attempts) older than their
// account's retention, in batches of batch rows, at most maxBatches batches, and returns how many
// it deleted. Each batch is its own statement that locks with SKIP LOCKED, so replicas running
// it at the same time share the work and no batch holds locks for long.
func PurgeExpired(ctx context.Context, db DB, batch, maxBatches int) (int64, error) {
	var total int64
	for i := 0; i < maxBatches; i++ {
		tag, err := purgeBatch(ctx, db, batch)
		if err != nil {
			return total, fmt.Errorf("purge deliveries: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			break
		}
	}
	return total, nil
}

// purgeBatchTimeout bounds one purge statement. Without it the statement would get the pool's
// default deadline for request-path statements (database.QueryTimeout, one second), too short for
// deleting a thousand deliveries with their attempts on a busy server.
const purgeBatchTimeout = 30 * time.Second

// purgeBatch deletes at most batch expired deliveries.
func purgeBatch(ctx context.Context, db DB, batch int) (pgconn.CommandTag, error) {
	ctx, cancel := context.WithTimeout(ctx, purgeBatchTimeout)
	defer cancel()
	return db.Exec(ctx, `
		DELETE FROM deliveries WHERE id IN (
			SELECT d.id FROM deliveries d JOIN accounts a ON a.id = d.account_id
			WHERE d.state IN ('delivered', 'failed')
			  AND d.finished_at < now() - CASE a.tier
			        WHEN 'free' THEN $1 * interval '1 second'
			        ELSE $2 * interval '1 second' END
			LIMIT $3
			FOR UPDATE OF d SKIP LOCKED)`,
		int64(RetentionFree/time.Second), int64(RetentionPaid/time.Second), batch)
}
