package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/webhook"
)

// domainOrDatastore passes the expected domain errors through and marks anything else as a
// datastore failure (500 datastore_error, like the other management routes).
func domainOrDatastore(err error, expected ...error) error {
	for _, e := range expected {
		if errors.Is(err, e) {
			return err
		}
	}
	return datastoreError(err)
}

// listDeliveries is GET /v1/management/deliveries (extension): newest first, filtered by status,
// keyset-paginated with an opaque cursor.
func (s *Server) listDeliveries(c echo.Context) error {
	acct, err := uuid.Parse(principalOf(c).AccountID)
	if err != nil {
		return err
	}
	if err := onlyQuery(c, "status", "limit", "cursor"); err != nil {
		return err
	}
	f := webhook.ListFilter{Status: c.QueryParam("status"), Cursor: c.QueryParam("cursor")}
	if vals, ok := c.QueryParams()["status"]; ok && vals[0] == "" {
		// Read as absent, it would list every delivery as if the filter had matched.
		return InvalidRequest("Query parameter status is empty: give pending, retrying, delivered or failed, or leave it out.")
	}
	switch f.Status {
	case "", webhook.StatePending, webhook.StateRetrying, webhook.StateDelivered, webhook.StateFailed:
	default:
		// Refused here rather than by webhook.ListDeliveries, whose error would quote the whole
		// value back, however long.
		return InvalidRequest("Query parameter status must be pending, retrying, delivered or failed, not %q.", clip(f.Status))
	}
	if l := c.QueryParam("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > webhook.MaxPageSize {
			return InvalidRequest("Query parameter limit must be a whole number from 1 to %d.", webhook.MaxPageSize)
		}
	}
	page, err := webhook.ListDeliveries(c.Request().Context(), s.pool, acct, f)
	if err != nil {
		return domainOrDatastore(err, webhook.ErrInvalidFilter)
	}
	if page.Deliveries == nil {
		page.Deliveries = []webhook.Delivery{}
	}
	// Timestamps as on every other route: ISO 8601 UTC to the second.
	for i := range page.Deliveries {
		d := &page.Deliveries[i]
		d.CreatedAt = d.CreatedAt.UTC().Truncate(time.Second)
		if d.FinishedAt != nil {
			t := d.FinishedAt.UTC().Truncate(time.Second)
			d.FinishedAt = &t
		}
		for j := range d.Log {
			d.Log[j].StartedAt = d.Log[j].StartedAt.UTC().Truncate(time.Second)
		}
	}
	return c.JSON(http.StatusOK, page)
}

// retryDelivery is POST /v1/management/deliveries/{id}/retry (extension, paid tiers): the same
// body bytes and signature go out again through the webhook workers. A repeated request returns
// the replay already under way instead of sending twice.
func (s *Server) retryDelivery(c echo.Context) error {
	p := principalOf(c)
	if webhook.ReplayAllowed(p.Tier) != nil {
		return Errorf(http.StatusForbidden, CodePlanUpgradeRequired,
			"Upgrade to the builder or scale plan to retry failed deliveries.",
			"Retrying deliveries is available on paid plans.")
	}
	acct, err := uuid.Parse(p.AccountID)
	if err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return webhook.ErrDeliveryNotFound
	}
	replay, err := webhook.Replay(c.Request().Context(), s.pool, s.js, s.layout, acct, id, s.auditEvent(c, audit.DeliveryReplayed, ""))
	if err != nil && replay != uuid.Nil {
		// The replay is committed and only its publish failed: the webhook workers' outbox sweep
		// sends it (webhook.Replay), so the request succeeded. A 500 here would make the client
		// retry into the same replay for nothing.
		s.log.Warn("retry delivery: replay stored but not published; the outbox sweep will send it",
			"delivery_id", replay, "replay_of", id, "err", err)
		err = nil
	}
	if err != nil {
		return domainOrDatastore(err, webhook.ErrDeliveryNotFound, webhook.ErrNotReplayable)
	}
	// A repeated request gets the replay already made, which may have been delivered since: its
	// state, read once more, not a "pending" it no longer is. A new replay is pending.
	state := webhook.StatePending
	if err := s.pool.QueryRow(c.Request().Context(), `SELECT state FROM deliveries WHERE id = $1`, replay).Scan(&state); err != nil {
		s.log.Warn("retry delivery: replay state not read", "delivery_id", replay, "err", err)
		state = webhook.StatePending
	}
	return c.JSON(http.StatusAccepted, map[string]string{"delivery_id": replay.String(), "replay_of": id.String(), "status": state})
}
