package list

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
)

// Upload is what Import needs besides the file.
type Upload struct {
	AccountID     string
	KeyID         string // "" when not known
	Tier          plan.Tier
	Plan          plan.Limits
	Name          string
	WebhookURL    string // "" for no completion callback
	WebhookSecret string // sealed (internal/sealed) by the API; "" for none
	Now           time.Time
	// Sandbox: the upload's key is a sandbox key. The list is then answered by the sandbox and
	// admitted against nothing: no hold, no quota, no spend cap (docs/sandbox.md).
	Sandbox bool
	// Stored, when set, runs last inside the import's transaction, just before its COMMIT, with
	// the list as stored: the API keeps the request's Idempotency-Key answer there, so that the
	// key and the list commit together (docs/api.md, "Idempotency").
	Stored func(ctx context.Context, tx pgx.Tx, l List) error
}

// Import stores an upload in one transaction — its rows by COPY as they are read, its unique
// addresses, and the admission of those addresses against the free tier's monthly quota or a
// paid tier's spend cap — and returns the list, queued. Any error leaves nothing stored and
// nothing charged: an *InputError or *TooManyRowsError from the file, a usage refusal
// (*usage.QuotaExceeded, *usage.SpendCapExceeded) or a datastore error; the one exception is a
// COMMIT whose answer was lost, after which the list may be stored, queued and held. The caller
// starts the list with Start.
//
// Only the statements whose work grows with the file (its COPY, the numbering of its unique
// addresses, the commit) have the bulk budget. The others — taking a connection and beginning,
// storing the list row, the admission, the counts — have database.QueryTimeout each, so a
// Postgres that does not answer turns the upload into a 503 within about a second instead of a
// wait as long as the bulk budget (docs/reliability.md).
func (s *Store) Import(ctx context.Context, u Upload, rd *Reader) (List, error) {
	ctx, cancel := bulk(ctx)
	defer cancel()
	id, err := uuid.NewV7()
	if err != nil {
		return List{}, err
	}
	quick := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, database.QueryTimeout) }
	bctx, bcancel := quick()
	tx, err := s.db.Begin(bctx) // bctx bounds the begin only, not the transaction
	bcancel()
	if err != nil {
		return List{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var (
		unique int64
		chunks int
	)
	err = func() error {
		var key *string
		if u.KeyID != "" {
			key = &u.KeyID
		}
		var hook, secret *string
		if u.WebhookURL != "" {
			hook = &u.WebhookURL
			if u.WebhookSecret != "" {
				secret = &u.WebhookSecret
			}
		}
		// The list row comes first so that nothing references a list that is not there; its
		// counts are filled in once the file has been read.
		qctx, qcancel := quick()
		_, err := tx.Exec(qctx, `INSERT INTO lists (id, account_id, key_id, name, format, columns, email_column,
			webhook_url, webhook_secret, sandbox) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			id, u.AccountID, key, u.Name, rd.format, rd.Columns(), rd.EmailColumn(), hook, secret, u.Sandbox)
		qcancel()
		if err != nil {
			return fmt.Errorf("store list: %w", err)
		}
		src := &rowSource{rd: rd, id: id}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"list_rows"}, []string{"list_id", "row_no", "email", "cols"}, src); err != nil {
			if src.Err() != nil {
				return src.Err() // the file's problem, which COPY reports as its own failure
			}
			return err
		}
		// The unique addresses, numbered and cut into chunks in domain order.
		tag, err := tx.Exec(ctx, `INSERT INTO list_addresses (list_id, email, idx, chunk)
			SELECT $1, email, (n - 1)::int, ((n - 1) / $2)::int
			FROM (SELECT email, row_number() OVER (ORDER BY split_part(email, '@', -1), email) AS n
			      FROM (SELECT DISTINCT email FROM list_rows WHERE list_id = $1) d) numbered`, id, s.cfg.ChunkSize)
		if err != nil {
			return fmt.Errorf("store list addresses: %w", err)
		}
		unique = tag.RowsAffected()
		// Admission of the whole list, worst case: every unique address verified and billable.
		// The list owns the hold (its id is the list's), which its chunks bill and its end
		// releases; it never expires. Concurrent uploads and requests of the account are decided
		// one after another on the month row, which this transaction keeps locked until it
		// commits (docs/lists.md, "Metering").
		// A sandbox list holds nothing: it is never billed, so its end releases no hold.
		if !u.Sandbox {
			qctx, qcancel = quick()
			_, err = usage.Admit(qctx, tx, usage.Request{
				AccountID: u.AccountID, Free: u.Tier == plan.Free, Units: int(unique), NoRate: true,
				RatePerMin: u.Plan.RateLimitPerMin, MonthlyCalls: u.Plan.MonthlyCalls, OverageEUR: u.Plan.OverageEUR, Now: u.Now,
				Hold: id,
			})
			qcancel()
			if err != nil {
				return err
			}
		}
		chunks = (int(unique) + s.cfg.ChunkSize - 1) / s.cfg.ChunkSize
		qctx, qcancel = quick()
		defer qcancel()
		if _, err = tx.Exec(qctx, `UPDATE lists SET rows = $2, unique_addresses = $3, chunks = $4 WHERE id = $1`,
			id, rd.Rows(), unique, chunks); err != nil || u.Stored == nil {
			return err
		}
		sctx, scancel := quick()
		defer scancel()
		l, err := get(sctx, tx, u.AccountID, id)
		if err != nil {
			return err
		}
		return u.Stored(sctx, tx, l)
	}()
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return List{}, err
	}
	qctx, qcancel := quick()
	defer qcancel()
	if l, err := s.Get(qctx, u.AccountID, id); err == nil {
		return l, nil
	}
	// Stored and admitted, but not readable back right now: the list exists, and an error here
	// would make the client upload (and be charged for) it again. Answer with what was written.
	acct, _ := uuid.Parse(u.AccountID)
	var hook *string
	if u.WebhookURL != "" {
		hook = &u.WebhookURL
	}
	return List{ID: id, AccountID: acct, Name: u.Name, Format: rd.format, Columns: rd.Columns(), EmailColumn: rd.EmailColumn(),
		State: Queued, Rows: rd.Rows(), Unique: int(unique), Chunks: chunks, WebhookURL: hook, CreatedAt: u.Now, UpdatedAt: u.Now,
		HasWebhookSecret: u.WebhookURL != "" && u.WebhookSecret != "", Sandbox: u.Sandbox}, nil
}

// rowSource feeds the upload's rows to COPY as the Reader parses them.
type rowSource struct {
	rd  *Reader
	id  uuid.UUID
	row Row
	err error
}

func (r *rowSource) Next() bool {
	r.row, r.err = r.rd.Next()
	return r.err == nil
}

func (r *rowSource) Values() ([]any, error) {
	return []any{r.id, r.row.No, r.row.Email, r.row.Cols}, nil
}

func (r *rowSource) Err() error {
	if r.err != nil && !isEOF(r.err) {
		return r.err
	}
	return nil
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
