package api

import (
	"context"
	"errors"
	"github.com/mailvet/mailvet/internal/sealed"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/clientaddr"
	"github.com/mailvet/mailvet/internal/dashboard"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/httpbody"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/listname"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/webhook"
)

// Bounds of the list routes besides the configured size limits (docs/lists.md, "Limits").
const (
	maxListLineBytes = 100 << 10 // one line of an uploaded file
	maxColumnName    = 200
	// listImportBudget and listExportBudget bound the database work of one upload or download of
	// the largest list.
	listImportBudget = 10 * time.Minute
	// listReceiveBudget bounds how long an upload's file may take to arrive (Server.uploadReceive):
	// 100 MB at about 170 KB/s.
	listReceiveBudget = 10 * time.Minute
	listExportBudget  = 30 * time.Minute
)

// uploadPath is the route whose body is a file: the JSON body guard and the 10 s body deadline do
// not apply to it, nor to the dashboard's upload form, which streams its file to this route
// (docs/lists.md, "Uploading"; docs/dashboard.md, "What a customer can do"). Both have an idle
// deadline instead (httpbody) and the list limits.
const uploadPath = "/v1/email/lists"

func isUpload(c echo.Context) bool {
	p := c.Request().URL.Path
	return c.Request().Method == http.MethodPost && (p == uploadPath || p == dashboard.UploadPath)
}

// uploadList stores an uploaded file as a list, admits its unique addresses, starts it, and
// answers 202 with the list (docs/lists.md).
func (s *Server) uploadList(c echo.Context) error {
	req := c.Request()
	mt, _, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
	format, ok := list.FormatOf(mt)
	if !ok {
		return InvalidRequest("Content-Type must be text/csv, application/x-ndjson or text/plain (the file is the body), not %q.", mt)
	}
	// A compressed body would otherwise be read as the file's bytes: refused as "not UTF-8" for
	// gzip, or silently taken as it is for an encoding that leaves text unchanged.
	if enc := req.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return InvalidRequest("Content-Encoding %q is not supported: send the file uncompressed; nothing was stored or charged.", clip(enc))
	}
	q := c.QueryParams()
	for k := range q {
		switch k {
		case "column", "name", "webhook_url", "callback_url", "webhook_secret":
		default:
			return InvalidRequest("Unknown query parameter %q; use column, name, webhook_url and webhook_secret.", k)
		}
	}
	// A callback parameter given empty (a template whose variable was unset) is refused as in a
	// JSON body, rather than read as absent: the list would run without the callback, or
	// unsigned, and nobody would be told.
	for _, k := range []string{"webhook_url", "callback_url", "webhook_secret"} {
		if vals, ok := q[k]; ok && vals[0] == "" {
			return InvalidRequest("Query parameter %s is empty: give it a value, or leave it out.", k)
		}
	}
	column, name := q.Get("column"), q.Get("name")
	if err := boundedText("column", column, maxColumnName); err != nil {
		return err
	}
	if err := listname.Check(name); err != nil {
		return InvalidRequest("Field name %v.", err)
	}
	hook := q.Get("webhook_url")
	if alias := q.Get("callback_url"); hook == "" {
		hook = alias
	} else if alias != "" && alias != hook {
		return InvalidRequest("Send the callback URL once, as webhook_url (callback_url is an alias).")
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
	if !s.dispatch.Up() {
		return unavailable(queue.ErrUnavailable) // before reading the file: it could not run
	}
	limit := s.cfg.Lists.MaxBytes
	if req.ContentLength > limit {
		return listTooLarge("The file is %d bytes; the limit is %d bytes.", req.ContentLength, limit)
	}
	who := s.callerOf(c)
	address := "unknown"
	if a, ok := clientaddr.Of(req, s.cfg.TrustedProxies); ok {
		address = a.String()
	}
	release, err := s.uploads.take(who.account, address, who.tier == plan.Free)
	if err != nil {
		if !errors.Is(err, errAccountUploadBusy) && !errors.Is(err, errAddressUploadBusy) {
			s.log.Warn("upload refused: no upload slot", "account", who.account, "address", address, "reason", err,
				"holders", s.uploads.holding())
		}
		return uploadBusy(err)
	}
	defer release()
	// The whole file first, then Postgres (spool.go): a slow client holds no database connection,
	// and one slower than the minimum rate holds no slot for long.
	file, err := spool(httpbody.WithMinRate(c.Response(), http.MaxBytesReader(c.Response(), req.Body, limit), s.uploadIdle,
		time.Now().Add(s.uploadReceive), s.uploads.limits.MinRate, s.uploadRateGrace))
	if err != nil {
		return s.uploadError(err)
	}
	defer file.Close()
	rd, err := list.NewReader(file, format, column, list.Limits{MaxRows: s.cfg.Lists.MaxRows, MaxLineBytes: maxListLineBytes})
	if err != nil {
		return s.uploadError(err)
	}
	if secret != "" {
		// Only the sealed value is stored (docs/reliability.md, "Webhook secrets at rest").
		if secret, err = sealed.Or(s.cfg.Secrets).Seal(secret); err != nil {
			return internalError()
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), listImportBudget)
	defer cancel()
	l, err := s.lists.Import(ctx, list.Upload{AccountID: who.account, KeyID: who.key, Tier: who.tier, Plan: who.plan,
		Name: name, WebhookURL: hook, WebhookSecret: secret, Now: s.now(), Sandbox: who.sandbox}, rd)
	if err != nil {
		return s.uploadError(err)
	}
	// The list is stored and admitted: from here on the answer is 202, whatever fails, or the
	// client would upload and be charged for it again. Starting it is best effort, as the sweep
	// of the verifier workers starts (and publishes the chunks of) any list this does not. These
	// are request-path statements: a context without the import's long deadline gives each the
	// database's default one (about a second), so a Postgres that stopped answering does not
	// hold the answer.
	qctx := context.WithoutCancel(req.Context())
	s.publishChunks(qctx, l.AccountID)
	if got, err := s.lists.Get(qctx, who.account, l.ID); err == nil {
		l = got
	} else {
		s.log.Warn("upload stored; its list could not be read back", "list_id", l.ID, "err", err)
	}
	c.Response().Header().Set(echo.HeaderLocation, uploadPath+"/"+l.ID.String())
	return c.JSON(http.StatusAccepted, l.View(s.cfg.PublicURL, s.now()))
}

// publishChunks starts the account's queued lists and publishes the chunks they hand out.
func (s *Server) publishChunks(ctx context.Context, account uuid.UUID, chunks ...list.Chunk) {
	started, err := s.lists.Start(ctx, account)
	if err != nil {
		s.log.Warn("start lists", "account", account, "err", err)
	}
	if err := queue.PublishChunks(ctx, s.js, s.layout, time.Second, append(chunks, started...), nil); err != nil {
		s.log.Warn("publish list chunks", "account", account, "err", err)
	}
}

// uploadError maps what can go wrong while reading and storing an upload. The connection is
// closed after a refusal: the rest of the file may still be on its way.
func (s *Server) uploadError(err error) error {
	var (
		in   *list.InputError
		many *list.TooManyRowsError
		big  *http.MaxBytesError
	)
	var e *Error
	switch {
	case errors.As(err, &in):
		e = InvalidRequest("The file cannot be read: %s. Nothing was stored or charged.", in.Error())
		if in.Line > 0 {
			e.Extra = map[string]any{"line": in.Line}
		}
	case errors.As(err, &many):
		e = listTooLarge("The file has more than %d rows; split it into several lists.", many.Limit)
	case errors.As(err, &big):
		e = listTooLarge("The file is larger than %d bytes; split it into several lists.", big.Limit)
	case errors.Is(err, httpbody.ErrTooSlow):
		e = Errorf(http.StatusRequestTimeout, CodeRequestTimeout,
			"Send the file on a faster connection, or split it into smaller lists; nothing was stored or charged.",
			"The file arrived slower than %d bytes a second, the least this server accepts once an upload has run %s.",
			s.uploads.limits.MinRate, s.uploadRateGrace)
	case errors.Is(err, os.ErrDeadlineExceeded):
		e = requestTimeout()
	case errors.Is(err, errSpool):
		return unavailable(err)
	case errors.Is(err, errUploadRead):
		e = InvalidRequest("The upload's body could not be read (%s). Nothing was stored or charged.", bodyReadProblem(err))
	default:
		if admissionEnvelope(err) != nil {
			return err // quota, spend cap, quota check: the one error mapping
		}
		return storeError(err)
	}
	if e.Header == nil {
		e.Header = http.Header{}
	}
	e.Header.Set("Connection", "close")
	return e
}

// listTooLarge is the 413 of an upload over the limits. It closes the connection, as the rest of
// the file may still be on its way.
func listTooLarge(format string, args ...any) *Error {
	e := Errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		"Split the file into several lists within the limits; nothing was stored or charged.", format, args...)
	e.Header = http.Header{"Connection": {"close"}}
	return e
}

func boundedText(field, v string, max int) error {
	switch {
	case !utf8.ValidString(v):
		return InvalidRequest("Field %s is not valid UTF-8 text.", field)
	case utf8.RuneCountInString(v) > max:
		return InvalidRequest("Field %s is longer than %d characters.", field, max)
	case strings.IndexByte(v, 0) >= 0:
		return InvalidRequest("Field %s contains a NUL character.", field)
	}
	return nil
}

// listLists pages through the account's lists, newest first.
func (s *Server) listLists(c echo.Context) error {
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
	ls, more, err := s.lists.Page(c.Request().Context(), s.callerOf(c).account, after, limit)
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

// ownList reads the list of the path's id, of the caller's account only.
func (s *Server) ownList(c echo.Context) (list.List, error) {
	id, err := list.ListID(c.Param("id"))
	if err != nil {
		return list.List{}, err
	}
	l, err := s.lists.Get(c.Request().Context(), s.callerOf(c).account, id)
	return l, storeError(err)
}

// storeError is a list store's error for the one error mapping: a Postgres that did not answer
// is the 503 the client retries, not a 500.
func storeError(err error) error {
	if err != nil && !errors.Is(err, list.ErrNotFound) && !errors.Is(err, list.ErrFinished) && database.Unreachable(err) {
		return datastoreUnavailable()
	}
	return err
}

// cancelList stops a queued or running list; its unverified addresses are not billed.
func (s *Server) cancelList(c echo.Context) error {
	id, err := list.ListID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, started, err := s.lists.Cancel(ctx, s.callerOf(c).account, id)
	if err != nil {
		return storeError(err)
	}
	if len(started) > 0 {
		s.publishChunks(ctx, l.AccountID, started...)
	}
	return c.JSON(http.StatusOK, l.View(s.cfg.PublicURL, s.now()))
}

// deleteList removes a list's rows and results for good.
func (s *Server) deleteList(c echo.Context) error {
	id, err := list.ListID(c.Param("id"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	who := s.callerOf(c)
	started, err := s.lists.Delete(ctx, who.account, id)
	if err != nil {
		return storeError(err)
	}
	if len(started) > 0 {
		account, _ := uuid.Parse(who.account)
		s.publishChunks(ctx, account, started...)
	}
	return c.NoContent(http.StatusNoContent)
}

// listResults streams a list's rows with their results in input order, as CSV or NDJSON.
func (s *Server) listResults(c echo.Context) error {
	format := list.CSV
	switch f := c.QueryParam("format"); f {
	case "", "csv":
	case "ndjson":
		format = list.NDJSON
	default:
		return InvalidRequest("Query parameter format must be csv or ndjson, not %q.", f)
	}
	// Formula cells are escaped unless a program asks for the cells as stored (docs/lists.md,
	// "Formula cells"): the file is most often opened in a spreadsheet.
	formulas := list.EscapeFormulas
	switch v := c.QueryParam("escape_formulas"); v {
	case "", "true":
	case "false":
		formulas = list.RawFormulas
	default:
		return InvalidRequest("Query parameter escape_formulas must be true or false, not %q.", v)
	}
	var statuses []string
	if v := c.QueryParam("status"); v != "" {
		for _, st := range strings.Split(v, ",") {
			switch verdict.Status(st) {
			case verdict.StatusDeliverable, verdict.StatusUndeliverable, verdict.StatusUnknown, verdict.StatusCatchAll, verdict.StatusInvalid:
			default:
				return InvalidRequest("Query parameter status must be a comma-separated list of deliverable, undeliverable, catch_all, unknown and invalid; %q is none of them.", st)
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
	if err := s.lists.Export(ctx, l, format, statuses, formulas, res, res.Flush); err != nil {
		// The status line is gone: end the response without its terminating chunk, so that the
		// client sees an incomplete download instead of a file that looks whole.
		s.log.Error("list results", "list_id", l.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}
