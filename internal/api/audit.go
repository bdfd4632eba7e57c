package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/clientaddr"
)

// auditEvent is the event of kind done by the request's provisioning key: the key's display form
// as the actor (never the key), the client's address as MAILVET_TRUSTED_PROXIES lets us know it.
func (s *Server) auditEvent(c echo.Context, kind audit.Kind, detail string) audit.Event {
	p := principalOf(c)
	e := audit.Event{AccountID: p.AccountID, ActorType: audit.ActorKey, Actor: p.KeyDisplay, Kind: kind,
		Outcome: audit.Success, Detail: detail}
	if a, ok := clientaddr.Of(c.Request(), s.cfg.TrustedProxies); ok {
		e.Client = a
	}
	return e
}

// audited runs change in a transaction that also writes its audit event (change calls record):
// a change is never made without its event (docs/security.md, "When an audit write fails").
// change's errors pass through as it returned them; a failure to begin or commit is a datastore
// error (500 datastore_error, or 503 when Postgres is unreachable).
func (s *Server) audited(ctx context.Context, change func(tx pgx.Tx) error) error {
	var changeErr error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		changeErr = change(tx)
		return changeErr
	})
	if changeErr != nil {
		return changeErr
	}
	if err != nil {
		return datastoreError(err)
	}
	return nil
}

// record writes e with the change's transaction tx; a failure is a datastore error that fails
// the change.
func record(ctx context.Context, tx pgx.Tx, e audit.Event) error {
	if err := audit.Record(ctx, tx, e); err != nil {
		return datastoreError(err)
	}
	return nil
}

// auditEventJSON is one event of GET /v1/management/audit (docs/api.md, "GET /v1/management/audit").
type auditEventJSON struct {
	ID        string  `json:"id"`
	At        string  `json:"at"`
	Kind      string  `json:"kind"`
	Outcome   string  `json:"outcome"`
	ActorType string  `json:"actor_type"`
	Actor     string  `json:"actor"`
	ClientIP  *string `json:"client_ip"`
	Detail    string  `json:"detail"`
}

type auditPageJSON struct {
	Events     []auditEventJSON `json:"events"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

// listAudit is GET /v1/management/audit: the account's audit events, newest first, keyset-
// paginated with an opaque cursor.
func (s *Server) listAudit(c echo.Context) error {
	if err := onlyQuery(c, "limit", "cursor"); err != nil {
		return err
	}
	f := audit.Filter{Cursor: c.QueryParam("cursor")}
	if len(f.Cursor) > 100 {
		return InvalidRequest("Query parameter cursor is not one the API issued: use the next_cursor of the previous page.")
	}
	if l := c.QueryParam("limit"); l != "" {
		var err error
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > audit.MaxPageSize {
			return InvalidRequest("Query parameter limit must be a whole number from 1 to %d.", audit.MaxPageSize)
		}
	}
	page, err := audit.List(c.Request().Context(), s.pool, principalOf(c).AccountID, f)
	if errors.Is(err, audit.ErrInvalidFilter) {
		return InvalidRequest("Query parameter cursor is not one the API issued: use the next_cursor of the previous page.")
	}
	if err != nil {
		return datastoreError(err)
	}
	out := auditPageJSON{Events: make([]auditEventJSON, 0, len(page.Events)), NextCursor: page.NextCursor}
	for _, e := range page.Events {
		j := auditEventJSON{ID: e.ID.String(), At: isoTime(e.At), Kind: string(e.Kind),
			Outcome: string(e.Outcome), ActorType: string(e.ActorType), Actor: e.Actor, Detail: e.Detail}
		if e.Client.IsValid() {
			ip := e.Client.String()
			j.ClientIP = &ip
		}
		out.Events = append(out.Events, j)
	}
	return c.JSON(http.StatusOK, out)
}
