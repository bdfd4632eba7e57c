package verification

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/webhook"
)

// Callback is where an asynchronous verification's result goes.
type Callback struct {
	URL string
	// Secret signs the delivery; nil: it is not signed. A secret given is checked, also an
	// empty one.
	Secret *string
}

// Async stores a job and queues it, and returns its id; a verifier worker completes it and the
// webhook worker delivers the result (docs/api.md, "Asynchronous verification").
func (s *Service) Async(ctx context.Context, req Request, email string, cb Callback) (uuid.UUID, Window, error) {
	if err := CheckEmail("email", email); err != nil {
		return uuid.Nil, Window{}, err
	}
	if err := webhook.CheckURL(cb.URL); err != nil {
		return uuid.Nil, Window{}, invalid("%v.", err) // the message names webhook_url and the rule
	}
	secret, err := checkSecret(cb)
	if err != nil {
		return uuid.Nil, Window{}, err
	}
	if secret != "" {
		// Only the sealed value is stored: a copy of the database must not sign callbacks
		// (docs/reliability.md, "Webhook secrets at rest").
		sealedSecret, err := s.secrets.Seal(secret)
		if err != nil {
			return uuid.Nil, Window{}, unavailable(ErrUnstored)
		}
		secret = sealedSecret
	}
	if req.Caller.Sandbox {
		return s.sandboxAsync(ctx, req, email, cb, secret)
	}
	if !s.fleet.Up() {
		return uuid.Nil, Window{}, unavailable(queue.ErrUnavailable) // at once, before anything is charged or stored
	}
	who := req.Caller
	hold, w, err := s.admit(ctx, who, 1, SyncDeadline)
	if err != nil {
		return uuid.Nil, w, err
	}
	// The job is stored and takes over the request's hold in one transaction: from then on its
	// end bills and releases the hold (docs/architecture.md, "Metering and admission").
	id := hold.ID()
	committing := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := job.NewStore(tx).Create(ctx, job.New{ID: id, AccountID: who.Account, KeyID: who.Key, Email: email,
			WebhookURL: cb.URL, WebhookSecret: secret}); err != nil {
			return err
		}
		if err := usage.Adopt(ctx, tx, id); err != nil {
			return err
		}
		if req.Stored != nil {
			if err := req.Stored(ctx, tx, id, w); err != nil {
				return err
			}
		}
		committing = true
		return nil
	})
	if err != nil {
		// A failure before the COMMIT, or Postgres's own refusal of it, means nothing committed,
		// and the hold goes back. A connection lost during the COMMIT leaves the outcome open: a
		// committed job owns the hold, adopted, and its end bills it; an uncommitted hold expires
		// (docs/reliability.md, "Metering guarantees").
		var refused *pgconn.PgError
		if !committing || errors.As(err, &refused) {
			hold.Close()
		}
		s.log.Error("store job", "err", err)
		return uuid.Nil, w, unavailable(fmt.Errorf("%w: %w", ErrUnstored, err)) // the cause: a key deleted meanwhile is a 401 (internal/problem)
	}
	if err := s.fleet.PublishJob(ctx, id); err != nil {
		// Not known to be queued: remove the job so that the client's retry is the only copy.
		// Only a job actually removed makes this a refusal. One a runner has already started
		// (the message was stored; its acknowledgement was lost) will complete and call back;
		// one that could not be removed (Postgres did not answer) stays pending, and the jobs
		// sweep queues it (docs/reliability.md). Either way it is the client's job.
		removed, derr := job.NewStore(s.pool).Discard(context.WithoutCancel(ctx), id)
		if removed {
			// The job is gone: so is its hold. Discard cannot release it in its own statement,
			// and a hold without its job only makes the cap stricter until released here.
			if rerr := usage.Bill(context.WithoutCancel(ctx), s.pool, id, nil, true); rerr != nil {
				s.log.Warn("release the hold of a discarded job", "job_id", id, "err", rerr)
			}
			return uuid.Nil, w, unavailable(err)
		}
		s.log.Warn("job kept although its queueing failed", "job_id", id, "err", err, "discard_err", derr)
	}
	// The job's usage row is written when it completes, against the hold it owns.
	return id, w, nil
}
