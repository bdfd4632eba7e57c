package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/verification"
)

// verifyAsync queues an asynchronous verification and answers 202 with its job; a verifier
// worker completes it and the webhook worker delivers the result (docs/api.md, "Asynchronous
// verification").
func (s *Server) verifyAsync(c echo.Context, start time.Time, hookURL string, secret *string, email string) error {
	cb := verification.Callback{URL: hookURL, Secret: secret}
	id, w, err := s.verify.Async(c.Request().Context(), s.request(c, start), email, cb)
	setRateHeaders(c, w)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, map[string]string{"job_id": id.String(), "status": string(job.Pending)})
}
