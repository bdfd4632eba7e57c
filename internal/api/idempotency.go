package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
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

// keepJSON stores with tx, the transaction of the request's effect, the answer that c.JSON would
// give with status, the handler's headers h and v, as the answer of the request's Idempotency-Key
// (idempotency.Keep): the key and the effect commit together (docs/api.md, "Idempotency").
func keepJSON(ctx context.Context, keep idempotency.Keep, tx pgx.Tx, status int, h http.Header, v any) error {
	if h == nil {
		h = http.Header{}
	}
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return keep(ctx, tx, status, h, append(body, '\n'))
}

// sandboxScope keeps a sandbox key's Idempotency-Keys apart from its account's live ones
// (docs/sandbox.md): the same key sent with a live and with a sandbox key names two requests, so
// that a sandbox request never replays a live answer nor a live one a sandbox answer, whatever
// key either sends.
func sandboxScope(c echo.Context) string {
	if principalOf(c).Sandbox() {
		return idempotency.ScopeSandbox
	}
	return ""
}
