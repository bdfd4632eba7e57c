// Package job owns the asynchronous verification job: its table, its states and the transitions
// between them. The API creates and reads jobs, the verifier worker's job runner starts and
// finishes them; both go through this package (docs/api.md, "Asynchronous verification").
package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
)

// State is where a job is in its life: Pending → Processing → Completed | Failed, with
// Processing → Retrying → Processing while a greylisted probe waits for its re-probe.
type State string

// The states of a job. A job is Pending from its creation until a runner takes it, Processing
// while a runner verifies it (a runner that dies leaves it Processing, and the redelivered message
// takes it again), and then Completed, or Failed when verification itself failed or its attempts
// kept failing (Fail). A job whose probe was greylisted is Retrying until its re-probe at
// NextAttemptAt, when the redelivered message takes it again.
const (
	Pending    State = "pending"
	Processing State = "processing"
	Retrying   State = "retrying"
	Completed  State = "completed"
	Failed     State = "failed"
)

// ErrorRepeatedFailure is the error class of a job failed because its attempts kept failing for
// a reason that is not an outage (Fail; docs/reliability.md, "Asynchronous jobs that keep
// failing"). The cause of each failure is in the runner's log, never in the job.
const ErrorRepeatedFailure = "repeated_failure"

// ErrNotFound: no job with that id (for that account).
var ErrNotFound = errors.New("job not found")

// Job is one asynchronous verification.
type Job struct {
	ID        uuid.UUID
	AccountID uuid.UUID
	KeyID     *uuid.UUID
	Email     string
	// WebhookURL receives the result; WebhookSecret ("" for none) signs it. The secret is stored
	// sealed (internal/sealed; the API seals it) and is that sealed value here: the verifier worker
	// only hands it on to the delivery, unopened. It is never logged and never returned by the API.
	WebhookURL    string
	WebhookSecret string
	State         State
	// Result is the callback body once the job is Completed or Failed, else nil.
	Result      json.RawMessage
	CreatedAt   time.Time
	CompletedAt *time.Time
	// Retries counts the re-probes scheduled after greylisting; NextAttemptAt is when the next
	// one runs (set while Retrying), RetryingSince when the first greylisting reply came.
	Retries       int
	NextAttemptAt *time.Time
	RetryingSince *time.Time
	// ExpiredAt is when retention removed the finished job's email, result, webhook URL and
	// webhook secret (MAILVET_JOB_RETENTION, or a deletion of the address's history; docs/personal-data.md);
	// nil while the job keeps them.
	ExpiredAt *time.Time
	// Sandbox: a sandbox key's job (CreateCompleted), seen only by sandbox keys
	// (docs/sandbox.md, "Live and sandbox data are kept apart").
	Sandbox bool
}

// NotDueError is Start's answer for a Retrying job whose re-probe is not due yet (a message
// redelivered early): the message should come back at At.
type NotDueError struct{ At time.Time }

func (e *NotDueError) Error() string {
	return fmt.Sprintf("job re-probe not due until %s", e.At.Format(time.RFC3339Nano))
}

// Store reads and writes jobs.
type Store struct{ db database.DB }

// NewStore returns a store on db.
func NewStore(db database.DB) *Store { return &Store{db: db} }

// New is what Create needs to store a job.
type New struct {
	// ID is the job's id; the zero id makes a new one. The API passes the id of the request's
	// usage hold, which the job then owns (usage.Adopt).
	ID            uuid.UUID
	AccountID     string
	KeyID         string // "" when not known
	Email         string
	WebhookURL    string
	WebhookSecret string // sealed (internal/sealed); "" for none
}

// Create stores a Pending job and returns its id.
func (s *Store) Create(ctx context.Context, n New) (uuid.UUID, error) {
	id := n.ID
	if id == uuid.Nil {
		id = uuid.New()
	}
	var key, secret *string
	if n.KeyID != "" {
		key = &n.KeyID
	}
	if n.WebhookSecret != "" {
		secret = &n.WebhookSecret
	}
	_, err := s.db.Exec(ctx, `INSERT INTO jobs (id, account_id, key_id, email, webhook_url, webhook_secret, state)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, n.AccountID, key, n.Email, n.WebhookURL, secret, Pending)
	if err != nil {
		return uuid.Nil, fmt.Errorf("store job: %w", err)
	}
	return id, nil
}

// CreateCompleted stores a job that is Completed from the start, with its callback body: a
// sandbox key's job (docs/sandbox.md), answered at once without the worker fleet. It never enters
// the JOBS stream, and the sweep never takes it (it is finished). db is the transaction that also
// stores the job's delivery.
func CreateCompleted(ctx context.Context, db database.DB, n New, body []byte) error {
	var key, secret *string
	if n.KeyID != "" {
		key = &n.KeyID
	}
	if n.WebhookSecret != "" {
		secret = &n.WebhookSecret
	}
	_, err := db.Exec(ctx, `INSERT INTO jobs (id, account_id, key_id, email, webhook_url, webhook_secret, state, result, completed_at, sandbox)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), true)`, n.ID, n.AccountID, key, n.Email, n.WebhookURL, secret, Completed, body)
	if err != nil {
		return fmt.Errorf("store job: %w", err)
	}
	return nil
}

// Discard removes a job that is still Pending: one that could not be queued, so that the client's
// retry is the only copy. It reports whether it did: a job a runner has already started (its
// message was stored although the API never heard so) is not removed, and will complete.
func (s *Store) Discard(ctx context.Context, id uuid.UUID) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM jobs WHERE id = $1 AND state = $2`, id, Pending)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Get returns the job id of account, or ErrNotFound: jobs are visible only to their own account.
func (s *Store) Get(ctx context.Context, id uuid.UUID, account string) (Job, error) {
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM jobs WHERE id = $1 AND account_id = $2`, id, account))
}

// GetOfMode returns the job id of account made by a key of the same mode (sandbox or live), or
// ErrNotFound: a sandbox key never sees a live job nor a live key a sandbox one
// (docs/sandbox.md, "Live and sandbox data are kept apart").
func (s *Store) GetOfMode(ctx context.Context, id uuid.UUID, account string, sandbox bool) (Job, error) {
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM jobs WHERE id = $1 AND account_id = $2 AND sandbox = $3`, id, account, sandbox))
}

// Start moves a Pending (or, redelivered after a runner died, Processing; or Retrying whose
// re-probe is due) job to Processing and returns it. ErrNotFound means there is nothing left to
// do: the job is finished, or was discarded. A Retrying job not due yet is a *NotDueError.
func (s *Store) Start(ctx context.Context, id uuid.UUID) (Job, error) {
	j, err := scan(s.db.QueryRow(ctx, `UPDATE jobs SET state = $2, next_attempt_at = NULL, updated_at = now()
		WHERE id = $1 AND (state IN ($3, $2) OR (state = $4 AND next_attempt_at <= now() + interval '50 milliseconds'))
		RETURNING `+columns, id, Processing, Pending, Retrying))
	if !errors.Is(err, ErrNotFound) {
		return j, err
	}
	var at *time.Time
	err = s.db.QueryRow(ctx, `SELECT next_attempt_at FROM jobs WHERE id = $1 AND state = $2`, id, Retrying).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Job{}, ErrNotFound
	case err != nil:
		return Job{}, err
	case at == nil:
		return Job{}, &NotDueError{At: time.Now()}
	}
	return Job{}, &NotDueError{At: *at}
}

// Retry moves a Processing job to Retrying until at: its probe was greylisted and the runner has
// scheduled a re-probe. It counts the retry and starts the window at the first. done is false
// when the job was not Processing (another runner finished it first).
func Retry(ctx context.Context, db database.DB, id uuid.UUID, at time.Time) (done bool, err error) {
	tag, err := db.Exec(ctx, `UPDATE jobs SET state = $2, next_attempt_at = $3, retries = retries + 1,
		retrying_since = coalesce(retrying_since, now()), updated_at = now() WHERE id = $1 AND state = $4`,
		id, Retrying, at, Processing)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// columns are the jobs columns scan reads, in its order.
const columns = `id, account_id, key_id, email, webhook_url, webhook_secret, state, result, created_at, completed_at,
	retries, next_attempt_at, retrying_since, expired_at, sandbox`

// scan reads one job; no row is ErrNotFound.
func scan(row pgx.Row) (Job, error) {
	var j Job
	var secret *string
	err := row.Scan(&j.ID, &j.AccountID, &j.KeyID, &j.Email, &j.WebhookURL, &secret, &j.State, &j.Result, &j.CreatedAt, &j.CompletedAt,
		&j.Retries, &j.NextAttemptAt, &j.RetryingSince, &j.ExpiredAt, &j.Sandbox)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, err
	}
	if secret != nil {
		j.WebhookSecret = *secret
	}
	return j, nil
}

// Finish moves a Processing job to Completed or Failed with its callback body; errClass names the
// failure ("" when completed). done is false when another runner finished it first: then the
// caller must not record or deliver anything. db may be a transaction, so that the job, its usage
// row and its delivery are stored together.
//
// The job's webhook secret is erased here: the delivery created in the same transaction carries
// it on (webhook.CreateDelivery), and a finished job is never run again, so keeping a copy would
// only widen what a database leak holds (docs/reliability.md, "Webhook secrets at rest").
func Finish(ctx context.Context, db database.DB, id uuid.UUID, state State, body []byte, errClass string) (done bool, err error) {
	if state != Completed && state != Failed {
		return false, fmt.Errorf("finish job %s: %q is not a final state", id, state)
	}
	return finish(ctx, db, id, state, body, errClass, Processing)
}

// Fail moves an unfinished job (Pending, Processing or Retrying) to Failed with its callback body
// and errClass: the runner gives it up after its attempts kept failing, whatever step they failed
// at, so the job may not have reached Processing. done is false when it was finished already.
// Like Finish, it erases the webhook secret and may run in the transaction of the job's delivery.
func Fail(ctx context.Context, db database.DB, id uuid.UUID, body []byte, errClass string) (done bool, err error) {
	return finish(ctx, db, id, Failed, body, errClass, unfinishedStates...)
}

// unfinishedStates are the states a job is in until it ends.
var unfinishedStates = []State{Pending, Processing, Retrying}

// names are states as the text array a statement takes.
func names(states []State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// finish moves job id, when it is in one of the states from, to state.
func finish(ctx context.Context, db database.DB, id uuid.UUID, state State, body []byte, errClass string, from ...State) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE jobs SET state = $2, result = $3, error_class = nullif($4, ''),
		webhook_secret = NULL, next_attempt_at = NULL, updated_at = now(), completed_at = now()
		WHERE id = $1 AND state = ANY($5)`, id, state, body, errClass, names(from))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// CountFailure counts one more failed attempt of an unfinished job, one that failed for a reason
// that is not an outage, and returns how many it has had. ErrNotFound: the job is finished or
// gone, and there is nothing left to try.
func CountFailure(ctx context.Context, db database.DB, id uuid.UUID) (int, error) {
	var n int
	err := db.QueryRow(ctx, `UPDATE jobs SET failures = failures + 1, updated_at = now()
		WHERE id = $1 AND state = ANY($2) RETURNING failures`, id, names(unfinishedStates)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	return n, err
}

// Unfinished locks and returns an unfinished job for the transaction db that ends it (Fail). It
// reads only what ending the job needs — whose it is, its address and where its callback goes —
// so that a job whose other columns cannot be read can still be failed. ErrNotFound: the job is
// finished or gone.
func Unfinished(ctx context.Context, db database.DB, id uuid.UUID) (Job, error) {
	var j Job
	var secret *string
	err := db.QueryRow(ctx, `SELECT id, account_id, key_id, email, webhook_url, webhook_secret, state FROM jobs
		WHERE id = $1 AND state = ANY($2) FOR UPDATE`, id, names(unfinishedStates)).
		Scan(&j.ID, &j.AccountID, &j.KeyID, &j.Email, &j.WebhookURL, &secret, &j.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, err
	}
	if secret != nil {
		j.WebhookSecret = *secret
	}
	return j, nil
}

// StaleJob is a job the sweep takes as lost: nobody is working on it and no queue message is
// known to be coming for it.
type StaleJob struct {
	ID    uuid.UUID
	State State
	// UpdatedAt is the job's last transition. A re-queue keyed by it is distinct from every
	// earlier message of the job, yet the same for every sweep until the job moves again.
	UpdatedAt time.Time
}

// Stale lists up to limit jobs whose queue message seems lost, for the sweep to queue again,
// oldest first:
//   - Pending jobs created more than age ago: an API that died between storing and queueing;
//   - Retrying jobs whose re-probe was due more than age ago: the message that was to come back
//     at NextAttemptAt is gone (a NATS store wiped, say);
//   - Processing jobs not updated for more than processingAge: a runner died and its message,
//     which would have been redelivered after AckWait and started the job again (updating it),
//     was lost with the store. processingAge must be several AckWaits, so that a job still being
//     worked on, or being redelivered, is never taken.
func (s *Store) Stale(ctx context.Context, age, processingAge time.Duration, limit int) ([]StaleJob, error) {
	rows, err := s.db.Query(ctx, `SELECT id, state, updated_at FROM jobs
		WHERE (state = $1 AND created_at < now() - make_interval(secs => $4))
		   OR (state = $2 AND coalesce(next_attempt_at, updated_at) < now() - make_interval(secs => $4))
		   OR (state = $3 AND updated_at < now() - make_interval(secs => $5))
		ORDER BY updated_at LIMIT $6`, Pending, Retrying, Processing, age.Seconds(), processingAge.Seconds(), limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StaleJob, error) {
		var j StaleJob
		err := row.Scan(&j.ID, &j.State, &j.UpdatedAt)
		return j, err
	})
}
