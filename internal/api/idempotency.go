package api

import (
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/httpbody"
	"github.com/mailvet/mailvet/internal/idempotency"
)

// idempotent guards a JSON route that creates something with the Idempotency-Key header
// (docs/api.md, "Idempotency"). Its body is bounded by the 2 MB body guard.
func (s *Server) idempotent() echo.MiddlewareFunc {
	return s.idem.Middleware(idempotency.Route{
		Body:      func(c echo.Context) io.Reader { return c.Request().Body },
		BodyError: jsonError,
	})
}

// idempotentUpload guards the list upload: its file is hashed as the handler spools it, and a
// retry's file is read with the upload's own limits (docs/lists.md, "Limits").
func (s *Server) idempotentUpload() echo.MiddlewareFunc {
	return s.idem.Middleware(idempotency.Route{
		Stream:  true,
		Headers: []string{"Mailvet-Webhook-Secret"},
		Body: func(c echo.Context) io.Reader {
			return httpbody.IdleUntil(c.Response(), http.MaxBytesReader(c.Response(), c.Request().Body, s.cfg.Lists.MaxBytes),
				s.uploadIdle, time.Now().Add(s.uploadReceive))
		},
		BodyError: s.uploadError,
	})
}
