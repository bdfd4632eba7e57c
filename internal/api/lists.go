package api

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/clientaddr"
	"github.com/mailvet/mailvet/internal/dashboard"
	"github.com/mailvet/mailvet/internal/httpbody"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verification"
	"github.com/mailvet/mailvet/internal/webhook"
)

// Bounds of the list routes besides the configured size limits (docs/lists.md, "Limits").
const (
	// listReceiveBudget bounds how long an upload's file may take to arrive (Server.uploadReceive):
	// 100 MB at about 170 KB/s.
	listReceiveBudget = 10 * time.Minute
	// listExportBudget bounds the database work of one download of the largest list; an
	// upload's is the verification service's (verification.ListImportBudget).
	listExportBudget = 30 * time.Minute
)

// uploadPath is the route whose body is a file: the JSON body guard and the 10 s body deadline do
// not apply to it, nor to the dashboard's upload form, which hands its file to the same
// verification service (docs/lists.md, "Uploading"; docs/dashboard.md, "What a customer can do").
// Both have an idle deadline instead (httpbody) and the list limits.
const uploadPath = "/v1/email/lists"

func isUpload(c echo.Context) bool {
	p := c.Request().URL.Path
	return c.Request().Method == http.MethodPost && (p == uploadPath || p == dashboard.UploadPath)
}

// ownBodyLimit says the request's body is bounded by its handler, not by the API's 2 MB guard:
// an upload's, and every request the dashboard serves (its routes are everything under
// dashboard.Prefix, dashboardRoute), which bounds bodies itself and refuses an oversized form
// with a page.
func ownBodyLimit(c echo.Context) bool {
	return isUpload(c) || strings.HasPrefix(c.Request().URL.Path, dashboard.Prefix)
}

// uploadList stores an uploaded file as a list, admits its unique addresses, starts it, and
// answers 202 with the list (docs/lists.md).
func (s *Server) uploadList(c echo.Context) error {
	req := c.Request()
	ct, err := contentType(req)
	if err != nil {
		return err
	}
	mt, _, _ := mime.ParseMediaType(ct)
	format, ok := list.FormatOf(mt)
	if !ok {
		return InvalidRequest("Content-Type must be text/csv, application/x-ndjson or text/plain (the file is the body), not %q.", clip(mt))
	}
	// A compressed body would otherwise be read as the file's bytes: refused as "not UTF-8" for
	// gzip, or silently taken as it is for an encoding that leaves text unchanged.
	if enc := req.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return InvalidRequest("Content-Encoding %q is not supported: send the file uncompressed; nothing was stored or charged.", clip(enc))
	}
	if err := onlyQuery(c, "column", "name", "webhook_url", "callback_url", "webhook_secret"); err != nil {
		return err
	}
	q := c.QueryParams()
	// A callback parameter given empty (a template whose variable was unset) is refused as in a
	// JSON body, rather than read as absent: the list would run without the callback, or
	// unsigned, and nobody would be told.
	for _, k := range []string{"webhook_url", "callback_url", "webhook_secret"} {
		if vals, ok := q[k]; ok && vals[0] == "" {
			return InvalidRequest("Query parameter %s is empty: give it a value, or leave it out.", k)
		}
	}
	column, name := q.Get("column"), q.Get("name")
	if err := verification.CheckListFields(column, name); err != nil {
		return err
	}
	hook := q.Get("webhook_url")
	if alias := q.Get("callback_url"); hook == "" {
		hook = alias
	} else if alias != "" && alias != hook {
		return InvalidRequest("Send the callback URL once, as webhook_url (callback_url is an alias).")
	}
	// The header, like the query parameters above, counts once and not empty: of two values one
	// would sign and the other be dropped, and an empty one would run the list unsigned, with
	// nobody told (docs/lists.md, "Bad input").
	switch vals := req.Header.Values("Mailvet-Webhook-Secret"); {
	case len(vals) > 1:
		return InvalidRequest("Send the Mailvet-Webhook-Secret header once, not %d times.", len(vals))
	case len(vals) == 1 && vals[0] == "":
		return InvalidRequest("Header Mailvet-Webhook-Secret is empty: give it a value, or leave it out.")
	}
	secret := req.Header.Get("Mailvet-Webhook-Secret")
	if alias := q.Get("webhook_secret"); secret == "" {
		secret = alias
	} else if alias != "" && alias != secret {
		return InvalidRequest("Send the webhook secret once: as the Mailvet-Webhook-Secret header, or as webhook_secret.")
	}
	// The query string and headers bypass the JSON decoder's checks: bytes that are not UTF-8 or
	// a NUL would reach Postgres, which refuses them, as a server error.
	if err := boundedText("webhook_url", hook, webhook.MaxURLLength); err != nil {
		return err
	}
	if err := boundedText("webhook_secret", secret, maxSecretLen); err != nil {
		return err
	}
	if hook != "" {
		if err := webhook.CheckURL(hook); err != nil {
			return InvalidRequest("%v.", err)
		}
	}
	if secret != "" {
		if hook == "" {
			return InvalidRequest("webhook_secret needs a webhook_url to sign for.")
		}
		if n := utf8.RuneCountInString(secret); n < minSecretLen || len(secret) > maxSecretLen {
			return InvalidRequest("Field webhook_secret must be at least %d characters and at most %d bytes.", minSecretLen, maxSecretLen)
		}
	}
	address := ""
	if a, ok := clientaddr.Of(req, s.cfg.TrustedProxies); ok {
		address = a.String()
	}
	// The file is read by the verification service (UploadList), bounded here as well by the
	// connection's deadlines: the whole file must arrive within listReceiveBudget, at no less
	// than the minimum rate once uploadRateGrace has passed.
	limit := s.cfg.Lists.MaxBytes
	body := httpbody.WithMinRate(c.Response(), http.MaxBytesReader(c.Response(), req.Body, limit), s.uploadIdle,
		time.Now().Add(s.uploadReceive), s.cfg.Uploads.MinRate, s.uploadRateGrace)
	up := verification.ListUpload{Caller: s.verifyCaller(c), Format: format,
		Column: column, Name: name, WebhookURL: hook, WebhookSecret: secret, Address: address, Size: req.ContentLength}
	// The answer of the request's Idempotency-Key commits with its list: a list stored while the
	// API lost its COMMIT's answer is what the key's retry gets, not a second list. The file is
	// spooled whole before the list's transaction begins, so the request is hashed, and its Keep
	// known, by then.
	kept := false
	up.Stored = func(ctx context.Context, tx pgx.Tx, l list.List) error {
		keep := idempotency.KeepOf(c)
		if keep == nil {
			return nil
		}
		h := http.Header{echo.HeaderLocation: {uploadPath + "/" + l.ID.String()}}
		if err := keepJSON(ctx, keep, tx, http.StatusAccepted, h, l.View(s.cfg.PublicURL, s.now())); err != nil {
			return err
		}
		kept = true
		return nil
	}
	l, err := s.verify.UploadList(req.Context(), up, body)
	if err != nil && kept {
		// Only the COMMIT followed the Keep: the list may be stored with its answer.
		idempotency.MayHaveCommitted(c)
	}
	var busy *verification.UploadBusyError
	if errors.As(err, &busy) && busy.Holders != nil {
		s.log.Warn("upload refused: no upload slot", "account", busy.Account, "address", busy.Address, "reason", busy.Reason,
			"holders", busy.Holders)
	}
	if err != nil {
		return s.uploadError(err)
	}
	c.Response().Header().Set(echo.HeaderLocation, uploadPath+"/"+l.ID.String())
	return c.JSON(http.StatusAccepted, l.View(s.cfg.PublicURL, s.now()))
}

// uploadError maps what can go wrong while reading and storing an upload (problem.Upload), but
// the file arriving slower than the minimum rate, which only this route enforces. The connection
// is closed after a refusal of the file: the rest of it may still be on its way.
func (s *Server) uploadError(err error) error {
	if errors.Is(err, httpbody.ErrTooSlow) {
		e := Errorf(http.StatusRequestTimeout, CodeRequestTimeout,
			"Send the file on a faster connection, or split it into smaller lists; nothing was stored or charged.",
			"The file arrived slower than %d bytes a second, the least this server accepts once an upload has run %s.",
			s.cfg.Uploads.MinRate, s.uploadRateGrace)
		e.Header = http.Header{"Connection": {"close"}}
		return e
	}
	if e := fromProblem(problem.Upload(err)); e != nil {
		return e
	}
	return storeError(err) // admission's refusals, the store's errors: the one error mapping
}

func boundedText(field, v string, max int) error { return verification.CheckText(field, v, max) }

// listLists pages through the account's lists of the key's mode, newest first.
func (s *Server) listLists(c echo.Context) error {
	if err := onlyQuery(c, "limit", "cursor"); err != nil {
		return err
	}
	limit := list.DefaultPageSize
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > list.MaxPageSize {
			return InvalidRequest("Query parameter limit must be a whole number from 1 to %d.", list.MaxPageSize)
		}
		limit = n
	}
	var after *uuid.UUID
	if v := c.QueryParam("cursor"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return InvalidRequest("Query parameter cursor must be the next_cursor of the previous page.")
		}
		after = &id
	}
	who := s.callerOf(c)
	ls, more, err := s.lists.PageOfMode(c.Request().Context(), who.account, who.sandbox, after, limit)
	if err != nil {
		return storeError(err)
	}
	views := make([]list.View, len(ls))
	for i, l := range ls {
		views[i] = l.View(s.cfg.PublicURL, s.now())
	}
	var next *string
	if more {
		id := ls[len(ls)-1].ID.String()
		next = &id
	}
	return c.JSON(http.StatusOK, map[string]any{"lists": views, "next_cursor": next})
}

// getList answers a list's state, counts and progress.
func (s *Server) getList(c echo.Context) error {
	l, err := s.ownList(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l.View(s.cfg.PublicURL, s.now()))
}

// ownList reads the list of the path's id, of the caller's account and key mode only.
func (s *Server) ownList(c echo.Context) (list.List, error) {
	id, err := list.ListID(c.Param("id"))
	if err != nil {
		return list.List{}, err
	}
	who := s.callerOf(c)
	l, err := s.lists.Get(c.Request().Context(), who.account, id)
	if err == nil && l.Sandbox != who.sandbox {
		err = list.ErrNotFound
	}
	return l, storeError(err)
}

// ownListID is the path's list id when the list is of the caller's key mode: a sandbox key
// never changes a live list, nor a live key a sandbox one (docs/sandbox.md, "Live and sandbox
// data are kept apart"); another mode's list is not found, as another account's is.
func (s *Server) ownListID(c echo.Context) (uuid.UUID, error) {
	id, err := list.ListID(c.Param("id"))
	if err != nil {
		return uuid.Nil, err
	}
	who := s.callerOf(c)
	sandbox, err := s.lists.IsSandbox(c.Request().Context(), who.account, id)
	if err == nil && sandbox != who.sandbox {
		err = list.ErrNotFound
	}
	return id, storeError(err)
}

// storeError is a list store's error for the one error mapping: a Postgres that did not answer
// is the 503 the client retries, not a 500 (problem.OfList).
func storeError(err error) error {
	if problem.ListStoreUnreachable(err) {
		return datastoreUnavailable()
	}
	return err
}

// cancelList stops a queued or running list; its unverified addresses are not billed.
func (s *Server) cancelList(c echo.Context) error {
	id, err := s.ownListID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, err := s.verify.CancelList(ctx, s.callerOf(c).account, id)
	if err != nil {
		return storeError(err)
	}
	return c.JSON(http.StatusOK, l.View(s.cfg.PublicURL, s.now()))
}

// deleteList removes a list's rows and results for good.
func (s *Server) deleteList(c echo.Context) error {
	id, err := s.ownListID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if err := s.verify.DeleteList(ctx, s.callerOf(c).account, id); err != nil {
		return storeError(err)
	}
	return c.NoContent(http.StatusNoContent)
}

// listResults streams a list's rows with their results in input order, as CSV or NDJSON.
func (s *Server) listResults(c echo.Context) error {
	if err := onlyQuery(c, "format", "status", "escape_formulas"); err != nil {
		return err
	}
	format := list.CSV
	switch f := c.QueryParam("format"); f {
	case "", "csv":
	case "ndjson":
		format = list.NDJSON
	default:
		return InvalidRequest("Query parameter format must be csv or ndjson, not %q.", clip(f))
	}
	// Formula cells are escaped unless a program asks for the cells as stored (docs/lists.md,
	// "Formula cells"): the file is most often opened in a spreadsheet.
	formulas := list.EscapeFormulas
	switch v := c.QueryParam("escape_formulas"); v {
	case "", "true":
	case "false":
		formulas = list.RawFormulas
	default:
		return InvalidRequest("Query parameter escape_formulas must be true or false, not %q.", clip(v))
	}
	var statuses []string
	if vals, ok := c.QueryParams()["status"]; ok && vals[0] == "" {
		// Read as absent, it would download every row as if the filter had matched.
		return InvalidRequest("Query parameter status is empty: give one or more of deliverable, undeliverable, catch_all, unknown and invalid, or leave it out.")
	}
	if v := c.QueryParam("status"); v != "" {
		for _, st := range strings.Split(v, ",") {
			switch verdict.Status(st) {
			case verdict.StatusDeliverable, verdict.StatusUndeliverable, verdict.StatusUnknown, verdict.StatusCatchAll, verdict.StatusInvalid:
			default:
				return InvalidRequest("Query parameter status must be a comma-separated list of deliverable, undeliverable, catch_all, unknown and invalid; %q is none of them.", clip(st))
			}
			statuses = append(statuses, st)
		}
	}
	l, err := s.ownList(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), listExportBudget)
	defer cancel()
	res := c.Response()
	name := "mailvet-list-" + l.ID.String()
	if format == list.CSV {
		res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		res.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.csv"`)
	} else {
		res.Header().Set(echo.HeaderContentType, "application/x-ndjson")
		res.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.ndjson"`)
	}
	res.Header().Set("Mailvet-List-State", string(l.State))
	res.WriteHeader(http.StatusOK)
	if c.Request().Method == http.MethodHead {
		return nil // the status and headers are the answer: the rows would be read to be dropped
	}
	if err := s.lists.Export(ctx, l, format, statuses, formulas, res, res.Flush); err != nil {
		// The status line is gone: end the response without its terminating chunk, so that the
		// client sees an incomplete download instead of a file that looks whole.
		s.log.Error("list results", "list_id", l.ID, "err", redact.Peer(err))
		panic(http.ErrAbortHandler)
	}
	return nil
}
