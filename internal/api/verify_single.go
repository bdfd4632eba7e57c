package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/verification"
)

// verifyOne is POST /v1/email/verify: one address, answered synchronously, or queued as an
// asynchronous job when the request names a callback URL.
func (s *Server) verifyOne(c echo.Context) error {
	start := time.Now()
	var req verifyRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Email == nil {
		return InvalidRequest("Field email is required.")
	}
	if err := verification.CheckEmail("email", *req.Email); err != nil {
		return err
	}
	if req.WebhookURL != nil && req.CallbackURL != nil && *req.WebhookURL != *req.CallbackURL {
		return InvalidRequest("Send the callback URL once, as webhook_url (callback_url is an alias).")
	}
	hook := req.WebhookURL
	if hook == nil {
		hook = req.CallbackURL
	}
	if hook == nil && req.WebhookSecret != nil {
		return InvalidRequest("Field webhook_secret needs webhook_url.")
	}
	if hook != nil {
		return s.verifyAsync(c, start, *hook, req.WebhookSecret, *req.Email)
	}
	ans, w, err := s.verify.One(c.Request().Context(), s.request(c, start), *req.Email)
	setRateHeaders(c, w)
	if err != nil {
		return err
	}
	// The result is billed only once written: one that did not reach the client is not owed,
	// and its hold goes back (docs/reliability.md, "Metering guarantees").
	defer ans.Close()
	if err := c.JSON(http.StatusOK, ans.Results[0]); err != nil {
		// The client went away before it had the result: it is not owed, and not kept for an
		// Idempotency-Key's retry, which is verified and billed once it is delivered.
		idempotency.NotDelivered(c)
		return nil
	}
	ans.Deliver()
	return nil
}
