package dashboard

import (
	"errors"
	"github.com/mailvet/mailvet/internal/audit"
	"net/http"
	"strings"

	"github.com/mailvet/mailvet/internal/privacy"
	"github.com/mailvet/mailvet/internal/redact"
)

// The data page (docs/dashboard.md, "Your data"; docs/personal-data.md): download everything the
// account stores, or delete the account. Both go through package privacy, as the management API
// does, so the rules are not written twice.

// dataView is the data page's content.
type dataView struct {
	AccountID string
	Email     string // what the deletion form asks to type
}

func (h *Handler) dataPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusOK, "data", &view{Title: "Your data", Nav: "settings", Session: s,
		Data: dataView{AccountID: s.AccountID, Email: s.Email}})
}

// exportData streams the account's export as a download (privacy.Export; the same document as
// GET /v1/management/account/export). An export cut short after its first byte aborts the
// connection, so the browser reports a failed download rather than saving half a file.
func (h *Handler) exportData(w http.ResponseWriter, r *http.Request, s *session) {
	out := &download{w: w}
	if r.Method == http.MethodHead {
		// The headers are the answer: the export would be read only to be dropped, and no export
		// happened to audit.
		out.start()
		return
	}
	// Never sent without its event (docs/security.md, "Audit log").
	if err := audit.Record(r.Context(), h.pool, h.sessionEvent(r, s, audit.AccountExported, "account data exported")); err != nil {
		h.failure(w, r, s, err)
		return
	}
	err := privacy.Export(r.Context(), h.pool, s.AccountID, out)
	if err == nil {
		return
	}
	if out.started {
		h.log.Warn("dashboard: export cut short", "account_id", s.AccountID, "err", redact.Peer(err))
		panic(http.ErrAbortHandler)
	}
	h.failure(w, r, s, err)
}

// download sends its headers with the first byte, so an error before any still gets a page.
type download struct {
	w       http.ResponseWriter
	started bool
}

func (d *download) Write(b []byte) (int, error) {
	if !d.started {
		d.start()
	}
	return d.w.Write(b)
}

// start sends the 200 and the download's headers.
func (d *download) start() {
	d.started = true
	d.w.Header().Set("Content-Type", "application/json")
	d.w.Header().Set("Content-Disposition", `attachment; filename="mailvet-export.json"`)
	d.w.WriteHeader(http.StatusOK)
}

// deleteAccount deletes the account after two confirmations: the user types the account's email,
// in any case or Unicode form (foldEmail; no single click, nor a form filled in by mistake,
// deletes), and gives the password (a session
// left open on a shared machine must not be enough to delete the account, as for a password
// change). Password attempts go through the sign-in throttle.
func (h *Handler) deleteAccount(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	fail := func(status int, msg string) {
		h.render(w, r, status, "data", &view{Title: "Your data", Nav: "settings", Session: s, Error: msg,
			Data: dataView{AccountID: s.AccountID, Email: s.Email}})
	}
	if foldEmail(strings.TrimSpace(r.PostForm.Get("confirm"))) != foldEmail(s.Email) {
		fail(http.StatusUnprocessableEntity, "Type your email address exactly as shown to confirm the deletion.")
		return
	}
	password := r.PostForm.Get("password")
	if password == "" || len(password) > maxPasswordBytes {
		fail(http.StatusUnprocessableEntity, "The password is wrong.")
		return
	}
	at, blocked, err := h.claimAttempt(ctx, r, s.Email)
	if err != nil {
		h.failure(w, r, s, err)
		return
	} else if blocked {
		fail(http.StatusTooManyRequests, throttledText(at.wait))
		return
	}
	if _, ok, err := h.passwordAttempt(ctx, s.Email, password, at); err != nil {
		h.failure(w, r, s, err)
		return
	} else if !ok {
		h.passwordRefused(r, s.Email, audit.AccountDeleted, at)
		fail(http.StatusUnprocessableEntity, "The password is wrong.")
		return
	}
	// The event names no email: the user's address goes with the account (docs/personal-data.md).
	by := h.auditEvent(r, s.AccountID, "", audit.AccountDeleted, audit.Success, "account deleted in the dashboard")
	by.ActorType, by.Actor = audit.ActorUser, "the account's dashboard user"
	switch err := privacy.DeleteAccount(ctx, h.pool, s.AccountID, by); {
	case errors.Is(err, privacy.ErrSubscriptionActive):
		fail(http.StatusConflict, "Your account pays for a subscription. Cancel it on the Billing page; once it has ended and the plan is back to free, you can delete the account.")
		return
	case err != nil && !errors.Is(err, privacy.ErrNotFound): // not found: deleted meanwhile in another tab
		h.failure(w, r, s, err)
		return
	}
	// The session went with the user; the cookie goes too.
	h.setCookie(w, r, SessionCookie, "", -1)
	h.render(w, r, http.StatusOK, "message", &view{Title: "Account deleted",
		Notice: "Your account and everything stored for it were deleted. Its keys no longer work."})
}
