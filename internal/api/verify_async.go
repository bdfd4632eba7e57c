package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/verification"
)

// verifyAsync queues an asynchronous verification and answers 202 with its job; a verifier
// worker completes it and the webhook worker delivers the result (docs/api.md, "Asynchronous
// verification").
func (s *Server) verifyAsync(c echo.Context, start time.Time, hookURL string, secret *string, email string) error {
	cb := verification.Callback{URL: hookURL, Secret: secret}
	req := s.request(c, start)
	if keep := idempotency.KeepOf(c); keep != nil {
		// The answer of the request's Idempotency-Key commits with its job: a job stored while
		// the API lost its COMMIT's answer is what the key's retry gets, not a second job.
		req.Stored = func(ctx context.Context, tx pgx.Tx, id uuid.UUID, w verification.Window) error {
			h := http.Header{}
			rateHeaders(h, w)
			return keepJSON(ctx, keep, tx, http.StatusAccepted, h, asyncAnswer(id))
		}
	}
	id, w, err := s.verify.Async(c.Request().Context(), req, email, cb)
	setRateHeaders(c, w)
	if errors.Is(err, verification.ErrUnstored) {
		idempotency.MayHaveCommitted(c)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, asyncAnswer(id))
}

// asyncAnswer is the body of the 202 that names a queued job.
func asyncAnswer(id uuid.UUID) map[string]string {
	return map[string]string{"job_id": id.String(), "status": string(job.Pending)}
}
