package dashboard

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/webhook"
)

// deliveriesData is the delivery log page.
type deliveriesData struct {
	Page       webhook.Page
	State      string
	States     []string
	CanRetry   bool
	RetryWhy   string
	Retention  string
	NextCursor string
}

var deliveryStates = []string{"", webhook.StatePending, webhook.StateRetrying, webhook.StateDelivered, webhook.StateFailed}

func (h *Handler) deliveriesPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.deliveriesAnswer(w, r, s, http.StatusOK, "")
}

func (h *Handler) deliveriesAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	q := r.URL.Query()
	f := webhook.ListFilter{Status: q.Get("state"), Cursor: q.Get("cursor")}
	if len(f.Cursor) > 64 {
		f.Cursor = "bad"
	}
	acct, err := uuid.Parse(a.ID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	page, err := webhook.ListDeliveries(ctx, h.pool, acct, f)
	if errors.Is(err, webhook.ErrInvalidFilter) {
		f = webhook.ListFilter{}
		page, err = webhook.ListDeliveries(ctx, h.pool, acct, f)
		msg, status = "That filter or page does not exist; showing the newest deliveries.", http.StatusBadRequest
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := deliveriesData{Page: page, State: f.Status, States: deliveryStates, Retention: "30 days"}
	if a.Tier == plan.Free {
		d.Retention = "24 hours"
	}
	if err := webhook.ReplayAllowed(a.Tier); err != nil {
		d.RetryWhy = h.retryWhy()
	} else {
		d.CanRetry = true
	}
	if page.NextCursor != "" {
		d.NextCursor = "?" + url.Values{"state": {f.Status}, "cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "deliveries", &view{Title: "Deliveries", Nav: "deliveries", Session: s, Data: d,
		Error: msg, Notice: notice(r)})
}

// retryWhy tells a free account why it has no Retry button, and points only to an upgrade this
// deployment sells: without Stripe prices the billing page has no Upgrade button.
func (h *Handler) retryWhy() string {
	if len(h.upgrades()) > 0 {
		return "Retrying failed deliveries is available on the builder and scale plans; upgrade on the Billing page."
	}
	return "Retrying failed deliveries is available on the builder and scale plans, which are not sold online on this deployment; ask its operator."
}

func (h *Handler) retryDelivery(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if err := webhook.ReplayAllowed(a.Tier); err != nil {
		h.deliveriesAnswer(w, r, s, http.StatusForbidden, h.retryWhy())
		return
	}
	acct, _ := uuid.Parse(a.ID)
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		err = webhook.ErrDeliveryNotFound
	} else {
		var replay uuid.UUID
		replay, err = webhook.Replay(ctx, h.pool, h.js, h.layout, acct, id, h.sessionEvent(r, s, audit.DeliveryReplayed, ""))
		if err != nil && replay != uuid.Nil {
			// Committed but not published: the outbox sweep sends it (webhook.Replay).
			h.log.Warn("dashboard: publish replay", "delivery", replay, "err", err)
			err = nil
		}
	}
	switch {
	case errors.Is(err, webhook.ErrDeliveryNotFound):
		h.deliveriesAnswer(w, r, s, http.StatusNotFound, "There is no such delivery in your account.")
	case errors.Is(err, webhook.ErrNotReplayable):
		h.deliveriesAnswer(w, r, s, http.StatusConflict, "Only a failed delivery can be retried.")
	case err != nil:
		h.failure(w, r, s, err)
	default:
		http.Redirect(w, r, Prefix+"/deliveries?done=retried", http.StatusSeeOther)
	}
}
