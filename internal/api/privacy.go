package api

import (
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/privacy"
	"github.com/mailvet/mailvet/internal/redact"
)

// The routes of a customer's personal data (docs/personal-data.md; docs/api.md, "Personal
// data"): deleting the account, exporting its data, and deleting one address's stored results.

// CodeSubscriptionActive: an account that pays for a subscription cannot be deleted until the
// subscription has ended (docs/errors.md).
const CodeSubscriptionActive = "subscription_active"

// deleteAccountRequest is DELETE /v1/management/account's body: confirm must be the account's
// id, so that a stray request (a wrong URL, a replayed script) cannot delete an account.
type deleteAccountRequest struct {
	Confirm *string `json:"confirm"`
}

func (s *Server) deleteAccount(c echo.Context) error {
	var req deleteAccountRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	p := principalOf(c)
	if req.Confirm == nil || *req.Confirm != p.AccountID {
		return InvalidRequest("Field confirm must be this account's id (account_id of GET /v1/management/account) to confirm its deletion.")
	}
	err := privacy.DeleteAccount(c.Request().Context(), s.pool, p.AccountID, s.auditEvent(c, audit.AccountDeleted, "account deleted with the management API"))
	switch {
	case errors.Is(err, privacy.ErrSubscriptionActive):
		return Errorf(http.StatusConflict, CodeSubscriptionActive,
			"Cancel the subscription in the billing portal (POST /v1/management/billing/portal) and delete the account once it has ended and the plan is back to free.",
			"The account pays for an active Stripe subscription; it cannot be deleted while the subscription runs.")
	case errors.Is(err, privacy.ErrNotFound):
		// Deleted meanwhile by another request: the key is gone with it.
		return Errorf(http.StatusUnauthorized, CodeInvalidAPIKey, "The account was deleted; its keys no longer work.",
			"The API key is not valid.")
	case err != nil:
		return datastoreError(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// exportAccount streams the account's data as one JSON document (privacy.Export; its sections
// are capped at privacy.ExportLimit entries each). Once the first byte is sent the status cannot
// change: a failure after it cuts the connection, and the client sees a truncated body.
func (s *Server) exportAccount(c echo.Context) error {
	p := principalOf(c)
	w := &lazyJSON{c: c}
	if c.Request().Method == http.MethodHead {
		// The status and headers are the answer (docs/api.md, "Conventions"): the export would be
		// read from every table of the account only to be dropped, and no export happened to audit.
		w.start()
		return nil
	}
	// Everything the account holds leaves in one answer: it is never sent without its event, so
	// that an export made with a stolen provisioning key shows in the audit log
	// (docs/security.md, "Audit log").
	if err := audit.Record(c.Request().Context(), s.pool, s.auditEvent(c, audit.AccountExported, "account data exported")); err != nil {
		return datastoreError(err)
	}
	err := privacy.Export(c.Request().Context(), s.pool, p.AccountID, w)
	if err != nil && !w.started {
		if errors.Is(err, privacy.ErrNotFound) {
			return Errorf(http.StatusUnauthorized, CodeInvalidAPIKey, "The account was deleted; its keys no longer work.",
				"The API key is not valid.")
		}
		return datastoreError(err)
	}
	if err != nil {
		s.log.Warn("account export cut short", "account_id", p.AccountID, "err", redact.Peer(err))
		panic(http.ErrAbortHandler) // the only way to tell the client the body is incomplete
	}
	return nil
}

// lazyJSON writes the 200 and its headers with the first byte of the body, so that an error
// before any byte still gets its own status.
type lazyJSON struct {
	c       echo.Context
	started bool
}

func (w *lazyJSON) Write(b []byte) (int, error) {
	if !w.started {
		w.start()
	}
	return w.c.Response().Write(b)
}

// start sends the 200 and the export's headers.
func (w *lazyJSON) start() {
	w.started = true
	h := w.c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	h.Set(echo.HeaderContentDisposition, `attachment; filename="mailvet-export.json"`)
	w.c.Response().WriteHeader(http.StatusOK)
}

// maxHistoryEmail bounds the email parameter: an address is at most 254 bytes.
const maxHistoryEmail = 254

// historyDeleted is DELETE /v1/email/history's answer: what was removed, by kind.
type historyDeleted struct {
	Email   string                 `json:"email"`
	Deleted privacy.HistoryDeleted `json:"deleted"`
}

func (s *Server) deleteHistory(c echo.Context) error {
	if err := onlyQuery(c, "email"); err != nil {
		return err
	}
	raw := c.QueryParam("email")
	// Checked before Normalize, whose lower-casing would turn bytes that are not UTF-8 into
	// U+FFFD and so delete another address's data; a NUL the database cannot compare at all
	// (docs/api.md, "DELETE /v1/email/history").
	switch {
	case !utf8.ValidString(raw):
		return InvalidRequest("Query parameter email is not valid UTF-8; percent-encode the address's UTF-8 bytes.")
	case strings.ContainsRune(raw, 0):
		return InvalidRequest("Query parameter email contains a NUL character (U+0000), which no address holds; remove it.")
	}
	email := list.Normalize(raw)
	switch {
	case email == "":
		return InvalidRequest("Query parameter email is required: the address whose stored results to delete.")
	case len(email) > maxHistoryEmail:
		return InvalidRequest("Query parameter email must be at most %d bytes.", maxHistoryEmail)
	case !strings.Contains(email, "@"):
		return InvalidRequest("Query parameter email must be an email address (it has no @).")
	}
	// A sandbox key reaches the sandbox's data only; a live key, the account's whole history, the
	// sandbox's included (docs/sandbox.md, "Live and sandbox data are kept apart").
	deleteHistory := privacy.DeleteHistory
	if s.callerOf(c).sandbox {
		deleteHistory = privacy.DeleteSandboxHistory
	}
	d, err := deleteHistory(c.Request().Context(), s.pool, s.callerOf(c).account, email,
		s.auditEvent(c, audit.HistoryDeleted, ""))
	if err != nil {
		return datastoreError(err)
	}
	return c.JSON(http.StatusOK, historyDeleted{Email: email, Deleted: d})
}
