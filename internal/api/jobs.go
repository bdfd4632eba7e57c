package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
)

// jobView is GET /v1/email/jobs/{job_id} (extension): the job's state and, once completed, the
// callback body — the same JSON as delivered to the webhook, though not byte for byte (it is kept
// as jsonb; the signed bytes live with the delivery).
type jobView struct {
	JobID       string          `json:"job_id"`
	Status      string          `json:"status"`
	Email       string          `json:"email"`
	Result      json.RawMessage `json:"result"`
	CreatedAt   string          `json:"created_at"`
	CompletedAt *string         `json:"completed_at"`
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
	who := s.callerOf(c)
	var (
		v         jobView
		result    []byte
		created   time.Time
		completed *time.Time
	)
	err = s.pool.QueryRow(c.Request().Context(), `SELECT id::text, state, email, result, created_at, completed_at
		FROM jobs WHERE id = $1 AND account_id = $2`, id, who.account).
		Scan(&v.JobID, &v.Status, &v.Email, &result, &created, &completed)
	if errors.Is(err, pgx.ErrNoRows) {
		return jobNotFound()
	}
	if err != nil {
		return datastoreError(err)
	}
	v.CreatedAt, v.CompletedAt = isoTime(created), isoTimePtr(completed)
	v.Result = json.RawMessage("null")
	if result != nil {
		v.Result = result
	}
	return c.JSON(http.StatusOK, v)
}
