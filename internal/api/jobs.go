package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/webhook"
)

// jobView is GET /v1/email/jobs/{job_id} (extension): the job's state (and, while it waits for a
// re-probe after greylisting, when that runs) and, once completed, the
// callback body — the same JSON as delivered to the webhook, though not byte for byte (it is kept
// as jsonb; the signed bytes live with the delivery).
type jobView struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
	// Email is null once the job expired.
	Email       *string         `json:"email"`
	Result      json.RawMessage `json:"result"`
	CreatedAt   string          `json:"created_at"`
	CompletedAt *string         `json:"completed_at"`
	// NextAttemptAt is when a retrying job (its probe was greylisted) is probed again, else null.
	NextAttemptAt *string `json:"next_attempt_at"`
	// ExpiredAt is when retention removed the finished job's email and result
	// (MAILVET_JOB_RETENTION; docs/personal-data.md); null while they are kept. An expired job
	// answers 200 with its status and timestamps, email and result null, so a client polling
	// late learns that the result existed and is gone, rather than a 404 it cannot tell from a
	// wrong id.
	ExpiredAt *string `json:"expired_at"`
}

func jobNotFound() *Error {
	return Errorf(http.StatusNotFound, "job_not_found",
		"Check the job_id returned by POST /v1/email/verify; jobs are visible only to their own account.",
		"No job with that id for this account.")
}

func (s *Server) getJob(c echo.Context) error {
	id, err := uuid.Parse(c.Param("job_id"))
	if err != nil {
		return jobNotFound()
	}
	// Another mode's job is not found, as another account's is (docs/sandbox.md).
	who := s.callerOf(c)
	j, err := s.jobs.GetOfMode(c.Request().Context(), id, who.account, who.sandbox)
	if errors.Is(err, job.ErrNotFound) {
		return jobNotFound()
	}
	if err != nil {
		return datastoreError(err)
	}
	v := jobView{JobID: j.ID.String(), Status: string(j.State), Result: json.RawMessage("null"),
		CreatedAt: isoTime(j.CreatedAt), CompletedAt: isoTimePtr(j.CompletedAt), ExpiredAt: isoTimePtr(j.ExpiredAt)}
	if j.ExpiredAt == nil {
		v.Email = &j.Email
	}
	if j.State == job.Retrying {
		v.NextAttemptAt = isoTimePtr(j.NextAttemptAt)
	}
	if j.Result != nil {
		v.Result = j.Result
	}
	return c.JSON(http.StatusOK, v)
}

// publishDelivery hands a delivery the verification service stored (a sandbox job's callback,
// docs/sandbox.md) to the webhook workers, as the verifier worker does for a live job's.
func (s *Server) publishDelivery(ctx context.Context, id uuid.UUID) error {
	if s.js == nil {
		return errors.New("no JetStream: the outbox sweep publishes the delivery")
	}
	return webhook.Publish(ctx, s.js, s.layout, id)
}
