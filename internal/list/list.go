// Package list is bulk list verification (docs/lists.md): an uploaded file's rows, stored with
// their original columns; its unique addresses, verified in chunks by any verifier worker;
// progress, counts and results; cancellation, deletion and retention.
//
// A list moves queued → running → completed, or to canceled or failed. Each state change, each
// chunk's results, their usage rows and the list's counters are written in one transaction, so
// a chunk redelivered after its worker died is verified again but never written, counted or
// billed twice.
package list

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/listlive"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
)

// State is where a list is in its life (docs/lists.md, "States").
type State string

// The states of a list.
const (
	Queued    State = "queued"    // stored; waits for one of its account's running slots
	Running   State = "running"   // chunks are with the verifier workers
	Completed State = "completed" // every unique address is verified
	Canceled  State = "canceled"  // stopped by its owner; what was verified stays
	Failed    State = "failed"    // could not be finished; unverified addresses are not billed
)

// Finished reports whether s is a final state.
func (s State) Finished() bool { return s == Completed || s == Canceled || s == Failed }

// ErrNotFound is a list that does not exist for the account (or was deleted, or purged).
var ErrNotFound = errors.New("list not found")

// ErrFinished is a cancel of a list that has already finished.
var ErrFinished = errors.New("list already finished")

// List is a list as the API shows it.
type List struct {
	ID               uuid.UUID
	AccountID        uuid.UUID
	Name             string
	Format           Format
	Columns          []string
	EmailColumn      int
	State            State
	Rows             int
	Unique           int
	Verified         int
	Chunks           int
	WebhookURL       *string
	Error            *string
	CreatedAt        time.Time
	StartedAt        *time.Time
	FinishedAt       *time.Time
	UpdatedAt        time.Time
	ExpiresAt        *time.Time
	Counts           []Count // by status and reason; filled by Get
	HasWebhookSecret bool    // given a secret; its delivery says so once the list's copy is erased
	// Sandbox: uploaded with a sandbox key, answered by the sandbox and never billed
	// (docs/sandbox.md).
	Sandbox bool
}

// Count is how many unique addresses of a list got one status and reason.
type Count struct {
	Status string
	Reason string
	N      int
}

// Config tunes how lists run. The zero value is not usable; see Defaults.
type Config struct {
	// ChunkSize is how many unique addresses (sorted by domain, so a chunk's addresses share
	// MX look-ups, catch-all probes and SMTP sessions) one work message carries.
	ChunkSize int
	// Window is how many chunks of one list are with the workers at once. Each list gets its
	// own window, so lists share the fleet chunk by chunk instead of first come, first served.
	Window int
	// MaxRunning is how many lists of one account run at once; the others wait, queued.
	MaxRunning int
	// Retention is how long a finished list's rows and results are kept, by tier.
	Retention map[plan.Tier]time.Duration
}

// Configured is Defaults with the retention of the configuration (config.ListLimits.Retention).
func Configured(retention map[plan.Tier]time.Duration) Config {
	c := Defaults()
	for t, d := range retention {
		c.Retention[t] = d
	}
	return c
}

// Defaults are the production settings (docs/lists.md).
func Defaults() Config {
	return Config{ChunkSize: 250, Window: 8, MaxRunning: 2, Retention: map[plan.Tier]time.Duration{
		plan.Free: 7 * 24 * time.Hour, plan.Builder: 30 * 24 * time.Hour, plan.Scale: 30 * 24 * time.Hour,
	}}
}

// Store reads and writes lists.
type Store struct {
	db  database.DB
	cfg Config
}

// NewStore returns a store on db.
func NewStore(db database.DB, cfg Config) *Store { return &Store{db: db, cfg: cfg} }

// Config is the store's configuration.
func (s *Store) Config() Config { return s.cfg }

const listColumns = `id, account_id, name, format, columns, email_column, state, rows, unique_addresses, verified,
	chunks, webhook_url,
	webhook_secret IS NOT NULL OR EXISTS (SELECT 1 FROM deliveries d WHERE d.list_id = lists.id
		AND (d.webhook_secret IS NOT NULL OR d.signature IS NOT NULL)),
	error, created_at, started_at, finished_at, updated_at, expires_at, sandbox`

func scanList(row pgx.Row) (List, error) {
	var l List
	err := row.Scan(&l.ID, &l.AccountID, &l.Name, &l.Format, &l.Columns, &l.EmailColumn, &l.State, &l.Rows, &l.Unique,
		&l.Verified, &l.Chunks, &l.WebhookURL, &l.HasWebhookSecret, &l.Error, &l.CreatedAt, &l.StartedAt, &l.FinishedAt,
		&l.UpdatedAt, &l.ExpiresAt, &l.Sandbox)
	if errors.Is(err, pgx.ErrNoRows) {
		return List{}, ErrNotFound
	}
	return l, err
}

// Live is the SQL condition, on the lists row named alias, that keeps the lists whose retention
// has not passed (listlive.Live, which the packages this one imports take too).
func Live(alias string) string { return listlive.Live(alias) }

// Get returns the list id of account with its counts, or ErrNotFound (also once it has expired). Two small reads whatever
// the list's size: the counts are kept up to date as chunks complete. They are read in one
// snapshot, so the counts always add up to the list's verified.
func (s *Store) Get(ctx context.Context, account string, id uuid.UUID) (l List, err error) {
	err = s.snapshot(ctx, func(tx pgx.Tx) error {
		l, err = get(ctx, tx, account, id)
		return err
	})
	if err != nil {
		return List{}, err
	}
	return l, nil
}

// IsSandbox reports whether list id of account was uploaded with a sandbox key, also once it
// has expired; ErrNotFound when the account has no such list.
func (s *Store) IsSandbox(ctx context.Context, account string, id uuid.UUID) (bool, error) {
	var sandbox bool
	err := s.db.QueryRow(ctx, `SELECT sandbox FROM lists WHERE id = $1 AND account_id = $2`, id, account).Scan(&sandbox)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ErrNotFound
	}
	return sandbox, err
}

// get reads one list of the account with its counts in tx.
func get(ctx context.Context, tx pgx.Tx, account string, id uuid.UUID) (List, error) {
	l, err := scanList(tx.QueryRow(ctx, `SELECT `+listColumns+` FROM lists WHERE id = $1 AND account_id = $2
		AND `+Live("lists"), id, account))
	if err != nil {
		return List{}, err
	}
	l.Counts, err = counts(ctx, tx, id)
	return l, err
}

// Page sizes of Page.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// Page returns up to limit lists of account, newest first, older than the list after (ids are
// UUIDv7, so their order is their creation order); more is true when another page follows.
// Each list has its counts, as Get gives them: one more small read for the whole page.
func (s *Store) Page(ctx context.Context, account string, after *uuid.UUID, limit int) (ls []List, more bool, err error) {
	return s.page(ctx, account, nil, after, limit)
}

// PageOfMode is Page of the lists uploaded with a key of one mode only (sandbox or live): a
// key's own (docs/sandbox.md, "Live and sandbox data are kept apart").
func (s *Store) PageOfMode(ctx context.Context, account string, sandbox bool, after *uuid.UUID, limit int) (ls []List, more bool, err error) {
	return s.page(ctx, account, &sandbox, after, limit)
}

// page is Page of the lists whose sandbox mark is sandbox; nil: of every list.
func (s *Store) page(ctx context.Context, account string, sandbox *bool, after *uuid.UUID, limit int) (ls []List, more bool, err error) {
	err = s.snapshot(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+listColumns+` FROM lists
			WHERE account_id = $1 AND ($2::uuid IS NULL OR id < $2) AND ($4::boolean IS NULL OR sandbox = $4)
			AND `+Live("lists")+` ORDER BY id DESC LIMIT $3`, account, after, limit+1, sandbox)
		if err != nil {
			return err
		}
		ls, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (List, error) { return scanList(r) })
		if err != nil {
			return err
		}
		if len(ls) > limit {
			ls, more = ls[:limit], true
		}
		if len(ls) == 0 {
			return nil
		}
		ids := make([]uuid.UUID, len(ls))
		at := make(map[uuid.UUID]int, len(ls))
		for i, l := range ls {
			ids[i], at[l.ID] = l.ID, i
		}
		rows, err = tx.Query(ctx, `SELECT list_id, status, reason, n FROM list_counts
			WHERE list_id = ANY($1) ORDER BY list_id, status, reason`, ids)
		if err != nil {
			return err
		}
		var (
			id uuid.UUID
			c  Count
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &c.Status, &c.Reason, &c.N}, func() error {
			ls[at[id]].Counts = append(ls[at[id]].Counts, c)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return ls, more, nil
}

// Cancel stops a queued or running list: chunks still queued are dropped by the workers, a chunk
// being verified is not written, and the list's hold is released: the addresses not verified
// were never billed. It returns the list as canceled, ErrFinished if it had already finished,
// ErrNotFound if it does not exist for account or has expired (as Get), and the chunks of another
// list of the account that it let start, for the caller to publish.
func (s *Store) Cancel(ctx context.Context, account string, id uuid.UUID) (List, []Chunk, error) {
	var started []Chunk
	err := s.tx(ctx, func(tx pgx.Tx) error {
		st, err := lockList(ctx, tx, id, account)
		if err != nil {
			return err
		}
		if st.expired {
			return ErrNotFound
		}
		if st.state.Finished() {
			return ErrFinished
		}
		if err := finish(ctx, tx, st, Canceled, "", s.cfg); err != nil {
			return err
		}
		started, err = s.startNext(ctx, tx, st.account)
		return err
	})
	if err != nil {
		return List{}, nil, err
	}
	l, err := s.Get(ctx, account, id)
	return l, started, err
}

// Delete removes a list with its rows, results and counts — personal data, gone for good. A list
// still running is canceled first, releasing its hold. The usage rows of what was verified stay
// (they are the bill) but hold no address. It returns the chunks of another list of the account
// that it let start. A list past its expires_at is ErrNotFound, as on every other route, and its
// rows are erased then and there rather than left for the sweep: the customer asked for them gone
// (docs/lists.md, "Cancel and delete").
func (s *Store) Delete(ctx context.Context, account string, id uuid.UUID) ([]Chunk, error) {
	ctx, cancel := bulk(ctx)
	defer cancel()
	var (
		started []Chunk
		expired bool
	)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		st, err := lockList(ctx, tx, id, account)
		if err != nil {
			return err
		}
		if expired = st.expired; expired {
			return deleteData(ctx, tx, id) // finished: it has an expires_at
		}
		if !st.state.Finished() {
			if err := finish(ctx, tx, st, Canceled, "", s.cfg); err != nil {
				return err
			}
			if started, err = s.startNext(ctx, tx, st.account); err != nil {
				return err
			}
		}
		return deleteData(ctx, tx, id)
	})
	if err == nil && expired {
		return nil, ErrNotFound
	}
	return started, err
}

// deleteData removes a list and everything stored for it.
func deleteData(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	for _, q := range []string{
		`DELETE FROM list_rows WHERE list_id = $1`,
		`DELETE FROM list_addresses WHERE list_id = $1`,
		`DELETE FROM list_counts WHERE list_id = $1`,
		`DELETE FROM lists WHERE id = $1`,
	} {
		if _, err := tx.Exec(ctx, q, id); err != nil {
			return fmt.Errorf("delete list %s: %w", id, err)
		}
	}
	return nil
}

// Purge deletes up to limit finished lists whose retention has passed, and returns how many.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	ctx, cancel := bulk(ctx)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT id FROM lists WHERE expires_at < $1 ORDER BY expires_at LIMIT $2`, now, limit)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		if err := s.tx(ctx, func(tx pgx.Tx) error { return deleteData(ctx, tx, id) }); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// lockedList is what the state changes of a locked list need.
type lockedList struct {
	id       uuid.UUID
	account  uuid.UUID
	tier     plan.Tier
	state    State
	unique   int
	verified int
	// expired: past its expires_at (not Live), so gone for its account although its rows are
	// still there. Only the account's routes read it: a list with an expires_at is finished, and
	// the workers leave finished lists alone.
	expired bool
}

// lockList locks list id (of account, unless account is empty) for the rest of tx.
func lockList(ctx context.Context, tx pgx.Tx, id uuid.UUID, account string) (lockedList, error) {
	st := lockedList{id: id}
	err := tx.QueryRow(ctx, `SELECT l.account_id, a.tier, l.state, l.unique_addresses, l.verified, NOT `+Live("l")+`
		FROM lists l JOIN accounts a ON a.id = l.account_id
		WHERE l.id = $1 AND ($2 = '' OR l.account_id::text = $2) FOR UPDATE OF l`, id, account).
		Scan(&st.account, &st.tier, &st.state, &st.unique, &st.verified, &st.expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	return st, err
}

// finish moves a locked, unfinished list to a final state and releases the list's hold in the
// same transaction: the addresses it did not verify were never billed, and their room under the
// account's quota or spend cap is back (docs/lists.md, "Metering").
func finish(ctx context.Context, tx pgx.Tx, st lockedList, to State, reason string, cfg Config) error {
	_, err := tx.Exec(ctx, `UPDATE lists SET state = $2, error = nullif($3, ''), finished_at = now(), updated_at = now(),
		expires_at = now() + $4::interval WHERE id = $1`, st.id, to, reason, cfg.Retention[st.tier])
	if err != nil {
		return err
	}
	return usage.Bill(ctx, tx, st.id, nil, true)
}

func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.db, fn)
}

// snapshot runs fn in a read-only transaction that sees one state of the database throughout:
// what a writer changes together (a list's verified and its counts) is read together. A pool or
// a connection begins it with its isolation in the BEGIN itself (no extra round trip); a store
// made on a caller's transaction reads within that one, which decides what it sees.
func (s *Store) snapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	if b, ok := s.db.(txBeginner); ok {
		return pgx.BeginTxFunc(ctx, b, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	}
	return s.tx(ctx, fn)
}

// txBeginner is what pgxpool.Pool and pgx.Conn have and a transaction has not.
type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// bulkBudget bounds the statements whose work grows with a list's size (its COPY, its deletion,
// its download) when the caller set no deadline: the database's default per-statement deadline
// (database.QueryTimeout) is sized for request-path statements, not for a million rows.
const bulkBudget = 15 * time.Minute

// bulk gives ctx the bulk budget unless it has a deadline already.
func bulk(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, bulkBudget)
}
