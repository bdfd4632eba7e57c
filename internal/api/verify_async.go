package api

import (
	"context"
	"net/http"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/webhook"
)

// verifyAsync stores a job, queues it, and answers 202; a verifier worker completes it and the
// webhook worker delivers the result (docs/api.md, "Asynchronous verification").
func (s *Server) verifyAsync(c echo.Context, hookURL string, secret *string, email string) error {
	if err := webhook.CheckURL(hookURL); err != nil {
		return InvalidRequest("%v.", err) // the message names webhook_url and the rule
	}
	sec := ""
	if secret != nil {
		sec = *secret
		if n := utf8.RuneCountInString(sec); n < minSecretLen || len(sec) > maxSecretLen {
			return InvalidRequest("Field webhook_secret must be at least %d characters and at most %d bytes.", minSecretLen, maxSecretLen)
		}
	}
	if !s.dispatch.Up() {
		return unavailable(queue.ErrUnavailable) // at once, before anything is charged or stored
	}
	who := s.callerOf(c)
	hold, err := s.admit(c, who, 1, syncDeadline)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// The job is stored and takes over the request's hold in one transaction: from then on its
	// end bills and releases the hold (docs/architecture.md, "Metering and admission").
	id := hold.ID()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := job.NewStore(tx).Create(ctx, job.New{ID: id, AccountID: who.account, KeyID: who.key, Email: email,
			WebhookURL: hookURL, WebhookSecret: sec}); err != nil {
			return err
		}
		return usage.Adopt(ctx, tx, id)
	})
	if err != nil {
		hold.Close()
		s.log.Error("store job", "err", err)
		return unavailable(errUnstored)
	}
	if err := s.dispatch.PublishJob(ctx, id); err != nil {
		// Not known to be queued: remove the job so that the client's retry is the only copy.
		// Only a job actually removed makes this a 503. One a runner has already started (the
		// message was stored; its acknowledgement was lost) will complete and call back; one
		// that could not be removed (Postgres did not answer) stays pending, and the jobs
		// sweep queues it (docs/reliability.md). Either way it is the client's job: 202.
		removed, derr := s.jobs.Discard(context.WithoutCancel(ctx), id)
		if removed {
			// The job is gone: so is its hold. Discard cannot release it in its own statement,
			// and a hold without its job only makes the cap stricter until released here.
			if rerr := usage.Bill(context.WithoutCancel(ctx), s.pool, id, nil, true); rerr != nil {
				s.log.Warn("release the hold of a discarded job", "job_id", id, "err", rerr)
			}
			return unavailable(err)
		}
		s.log.Warn("job kept although its queueing failed", "job_id", id, "err", err, "discard_err", derr)
	}
	// The job's usage row is written when it completes, against the hold it owns.
	return c.JSON(http.StatusAccepted, map[string]string{"job_id": id.String(), "status": string(job.Pending)})
}
