package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// sandboxIdempotency keeps a sandbox key's Idempotency-Keys apart from its account's live ones
// (docs/sandbox.md): the same key sent with a live and with a sandbox key names two requests, so
// that a sandbox request never replays a live answer nor a live one a sandbox answer. A sandbox
// request's valid key is replaced, before the guard reads it, by a digest of it under its own
// prefix: the same on every retry, within the key's length limit, and never an invalid key the
// client did not send (an invalid one is left for the guard to refuse as it is).
func sandboxIdempotency(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if vals := h.Values(idempotency.Header); principalOf(c).Sandbox() && len(vals) == 1 && idempotency.CheckKey(vals[0]) == nil {
			sum := sha256.Sum256([]byte(vals[0]))
			h.Set(idempotency.Header, "sandbox:"+hex.EncodeToString(sum[:]))
		}
		return next(c)
	}
}
