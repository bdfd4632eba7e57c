package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/audit"
)

// The Security page (/dashboard/security) lists the account's audit log, newest first, and this
// file is where the dashboard writes its events (docs/security.md, "Audit log"): a change writes
// its event in its own transaction (audited), what is over writes it after (recordOrLog).

// auditEvent is the event of kind by the dashboard user email of accountID, from r's client.
func (h *Handler) auditEvent(r *http.Request, accountID, email string, kind audit.Kind, outcome audit.Outcome, detail string) audit.Event {
	e := audit.Event{AccountID: accountID, ActorType: audit.ActorUser, Actor: email, Kind: kind, Outcome: outcome, Detail: detail}
	if a, ok := clientAddr(r, h.cfg.TrustedProxies); ok {
		e.Client = a
	}
	return e
}

// sessionEvent is the event of kind by the signed-in user of s.
func (h *Handler) sessionEvent(r *http.Request, s *session, kind audit.Kind, detail string) audit.Event {
	return h.auditEvent(r, s.AccountID, s.Email, kind, audit.Success, detail)
}

// audited runs change in a transaction and writes its event e with it (audit.Record): a change
// the dashboard makes never happens without its event (docs/security.md, "When an audit write
// fails"). change's errors pass through, so the pages still tell a key limit from an outage.
// event is called after change, so it can name what change made.
func (h *Handler) audited(ctx context.Context, change func(tx pgx.Tx) error, event func() audit.Event) error {
	return pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		if err := change(tx); err != nil {
			return err
		}
		return audit.Record(ctx, tx, event())
	})
}

// recordOrLog writes the event of something already over (a refused password, a sign-out): a
// failed write is logged at ERROR and counted rather than failing the page (audit.RecordOrLog).
func (h *Handler) recordOrLog(ctx context.Context, e audit.Event) {
	audit.RecordOrLog(context.WithoutCancel(ctx), h.pool, h.log, e)
}

// passwordRefused records a wrong password typed for email on the form of kind (signin,
// password_change, or account_deleted: the deletion form of the data page), and the sign-in throttle's delays this failure started (attempt.delays).
// The account is looked up here, by email, in the same way whether it exists or not: an
// unknown email's failure is written too, with no account and no email (only operators see it),
// so the time the refusal takes says nothing about which emails have an account.
func (h *Handler) passwordRefused(r *http.Request, email string, kind audit.Kind, at attempt) {
	ctx := r.Context()
	var accountID, stored string
	err := h.pool.QueryRow(ctx, `SELECT account_id, email FROM dashboard_users WHERE email_folded = $1`, foldEmail(email)).
		Scan(&accountID, &stored)
	detail := "wrong password"
	if kind == audit.PasswordChange {
		detail = "wrong current password"
	}
	if errors.Is(err, pgx.ErrNoRows) {
		detail = "no account has this email"
	} else if err != nil {
		h.log.Warn("dashboard: look up the account of a refused password", "err", err)
	}
	h.recordOrLog(ctx, h.auditEvent(r, accountID, stored, kind, audit.Failure, detail))
	for _, d := range at.delays {
		h.recordOrLog(ctx, h.auditEvent(r, accountID, stored, audit.SignInThrottled, audit.Failure, d.detail()))
	}
}

// securityData is the Security page.
type securityData struct {
	Events []auditRow
	// Older is the query of the next page, empty on the last.
	Older string
}

// auditRow is one event as the page shows it.
type auditRow struct {
	audit.Event
	What   string // the kind in words
	Failed bool
}

// kindText is what each kind reads as on the page; a kind not listed (a newer release's) shows
// as it is stored.
var kindText = map[audit.Kind]string{
	audit.SignIn:              "Sign-in",
	audit.SignInThrottled:     "Sign-ins delayed",
	audit.SignUp:              "Account created",
	audit.SignOut:             "Sign-out",
	audit.PasswordChange:      "Password change",
	audit.KeyCreated:          "Key created",
	audit.KeyRevoked:          "Key revoked",
	audit.SpendCapChanged:     "Spend cap changed",
	audit.PlanChanged:         "Plan changed",
	audit.AccountDeleted:      "Account deleted",
	audit.EmailConfirmed:      "Email confirmed",
	audit.AccountExported:     "Data exported",
	audit.DeliveryReplayed:    "Delivery replayed",
	audit.HistoryDeleted:      "Address history deleted",
	audit.BillingPortalOpened: "Billing portal opened",
}

// securityPageSize is how many events a page shows.
const securityPageSize = 50

func (h *Handler) securityPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	status, msg := http.StatusOK, ""
	f := audit.Filter{Limit: securityPageSize, Cursor: r.URL.Query().Get("cursor")}
	if len(f.Cursor) > 64 {
		f.Cursor = "bad"
	}
	page, err := audit.List(ctx, h.pool, s.AccountID, f)
	if errors.Is(err, audit.ErrInvalidFilter) {
		page, err = audit.List(ctx, h.pool, s.AccountID, audit.Filter{Limit: securityPageSize})
		status, msg = http.StatusBadRequest, "That page does not exist; showing the newest events."
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := securityData{}
	for _, e := range page.Events {
		what := kindText[e.Kind]
		if what == "" {
			what = string(e.Kind)
		}
		d.Events = append(d.Events, auditRow{Event: e, What: what, Failed: e.Outcome == audit.Failure})
	}
	if page.NextCursor != "" {
		d.Older = "?" + url.Values{"cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "security", &view{Title: "Security", Nav: "security", Session: s, Data: d, Error: msg})
}
