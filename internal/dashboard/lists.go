package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/listname"
	problems "github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/verification"
)

// The list pages (docs/dashboard.md, "What a customer can do") are the bulk lists (docs/lists.md)
// behind forms: every call goes to the verification service the API's list routes adapt
// (internal/verification), so uploads share the API's limits, upload slots, admission and
// billing, and refusals are worded from the one error mapping (internal/problem).

// Bounds of the upload form besides its file, which the service holds to the list limits: its
// fields (key, name, format, column, CSRF token) are a few hundred bytes.
const (
	uploadSlack     = 64 << 10 // the fields and the multipart framing, over the file's limit
	maxUploadFields = 16
	maxFieldBytes   = 1 << 10
)

// listView is a list (docs/lists.md, "Progress") as the API shows it, with what the pages add.
type listView struct{ list.View }

// Percent is the progress for the progress bar, 0 to 100.
func (l listView) Percent() float64 { return l.Progress * 100 }

// Created, Finished and Expires are the list's times as every dashboard page shows a time
// ("2026-11-23 08:41 UTC"); the API gives them in RFC 3339. Finished and Expires are "" while
// the list has none.
func (l listView) Created() string  { return timeText(l.CreatedAt) }
func (l listView) Finished() string { return timeText(orEmpty(l.FinishedAt)) }
func (l listView) Expires() string  { return timeText(orEmpty(l.ExpiresAt)) }

// ETA is the estimated time left in words ("12 min"), "" when the API gives none.
func (l listView) ETA() string {
	if l.ETASeconds == nil {
		return ""
	}
	return durationText(*l.ETASeconds)
}

func orEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// timeText formats an RFC 3339 time of the API as dateText does; anything else is shown as it
// came, rather than hidden.
func timeText(v string) string {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return v
	}
	return dateText(t)
}

// Running says whether the list is still moving, so the page refreshes itself.
func (l listView) Running() bool { return l.State == list.Queued || l.State == list.Running }

// Statuses are the counts by status, in a stable order.
func (l listView) Statuses() []statusCount {
	var out []statusCount
	for s, n := range l.Counts.ByStatus {
		out = append(out, statusCount{s, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Status < out[j].Status })
	return out
}

type statusCount struct {
	Status string
	N      int
}

// listsData is the lists page. KeyID, Name, Format and Column are what the upload form was
// sent with, so that a refused upload shows the form as the user filled it in.
type listsData struct {
	Keys   []account.Key
	Lists  []listView
	Next   string
	KeyID  string
	Name   string
	Format string
	Column string
	// Token is the form's one-time upload token (claimUpload): a second POST of the same form
	// goes to the list the first one created.
	Token string
	// The list limits (MAILVET_LIST_MAX_BYTES, MAILVET_LIST_MAX_ROWS) the form states.
	MaxSize string
	MaxRows int
}

// sizeText says a byte count as the form's help text does: "100 MB", "512 KB".
func sizeText(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MB", n>>20)
	}
	return fmt.Sprintf("%d KB", max(n>>10, 1))
}

// listsPageSize is how many lists a page of the lists page shows.
const listsPageSize = 20

// views are lists as the pages show them, at the API's clock.
func (h *Handler) views(ls []list.List) []listView {
	out := make([]listView, len(ls))
	for i, l := range ls {
		out[i] = h.view(l)
	}
	return out
}

func (h *Handler) view(l list.List) listView { return listView{l.View(h.cfg.PublicURL, h.now())} }

func (h *Handler) listsPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.listsAnswer(w, r, s, http.StatusOK, "", listsData{})
}

func (h *Handler) listsAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, msg string, d listsData) {
	ctx := r.Context()
	p, keys, _, err := h.principal(ctx, s, "")
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d.Keys = keys
	d.Token, _ = randomToken()
	d.MaxSize, d.MaxRows = sizeText(h.cfg.Lists.MaxBytes), h.cfg.Lists.MaxRows
	var after *uuid.UUID
	if c := r.URL.Query().Get("cursor"); c != "" {
		if id, err := uuid.Parse(c); err == nil {
			after = &id
		}
	}
	ls, more, err := h.verify.Lists(ctx, p.AccountID, after, listsPageSize)
	if err != nil {
		if pr := problems.OfList(err); pr == nil || !h.unavailable(w, r, s, pr) {
			h.failure(w, r, s, fmt.Errorf("list lists: %w", err))
		}
		return
	}
	d.Lists = h.views(ls)
	if more {
		d.Next = "?cursor=" + url.QueryEscape(ls[len(ls)-1].ID.String())
	}
	h.render(w, r, status, "lists", &view{Title: "Lists", Nav: "lists", Session: s, Data: d, Error: msg, Notice: notice(r)})
}

// uploadFormats maps the form's format choice to the list format (docs/lists.md).
var uploadFormats = map[string]list.Format{"csv": list.CSV, "ndjson": list.NDJSON, "text": list.Text}

// formatOf picks the format: the form's choice, else the file name's extension.
func formatOf(choice, filename string) (list.Format, bool) {
	if ct, ok := uploadFormats[choice]; ok {
		return ct, true
	}
	switch strings.ToLower(path.Ext(filename)) {
	case ".csv":
		return uploadFormats["csv"], true
	case ".ndjson", ".jsonl":
		return uploadFormats["ndjson"], true
	case ".txt", "":
		return uploadFormats["text"], true
	}
	return "", false
}

// readUploadForm reads the upload form's fields up to its file, and returns the file unread (nil
// when the form has none). The page puts the file input last, and browsers send a form's fields
// in page order, so the fields (the CSRF token first) are known before any of the file is read.
// A field over maxFieldBytes is read to its end (the body's bound holds) but not kept: long
// names the first such field with its length, so that the page can say which one it was and
// keep the others (docs/dashboard.md, "Forms").
func readUploadForm(r *http.Request) (form url.Values, file *multipart.Part, long *longField, err error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, nil, err
	}
	form = url.Values{}
	for range maxUploadFields {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return form, nil, long, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
		if part.FormName() == "file" {
			return form, part, long, nil
		}
		v, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
		if err != nil {
			return nil, nil, nil, err
		}
		if len(v) > maxFieldBytes {
			rest, err := io.Copy(io.Discard, part)
			if err != nil {
				return nil, nil, nil, err
			}
			if long == nil {
				long = &longField{part.FormName(), len(v) + int(rest)}
			}
			continue
		}
		form.Add(part.FormName(), string(v))
	}
	return nil, nil, nil, fmt.Errorf("more than %d form fields before the file", maxUploadFields)
}

// uploadList hands the chosen file, as it arrives, to the verification service with the chosen
// key, as the API's POST /v1/email/lists does: it applies the list limits to it (docs/lists.md,
// "Limits"), so a file as large as the API takes can be uploaded here too. A
// refusal reads the rest of the file first (discardBody), so that the browser, still sending,
// gets the page instead of a connection reset.
func (h *Handler) uploadList(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	form, file, long, err := readUploadForm(r)
	if err != nil {
		discardBody(w, r)
		h.badForm(w, r, s, err)
		return
	}
	if !sameToken(form.Get(csrfField), s.CSRF) {
		discardBody(w, r)
		h.csrfFailure(w, r, s)
		return
	}
	d := listsData{KeyID: form.Get("key_id"), Name: form.Get("name"), Format: form.Get("format"), Column: form.Get("column")}
	refuse := func(status int, msg string) {
		discardBody(w, r)
		h.listsAnswer(w, r, s, status, msg, d)
	}
	if long != nil {
		// Nothing is uploaded; the form comes back with the other fields as they were (a file
		// input cannot be filled in again by a page: the message says to choose it again).
		refuse(http.StatusUnprocessableEntity, tooLongText(long.name, long.n)+" Choose the file again.")
		return
	}
	p, _, ok, err := h.principal(ctx, s, d.KeyID)
	if err != nil {
		discardBody(w, r)
		h.failure(w, r, s, err)
		return
	}
	if !ok || d.KeyID == "" {
		refuse(http.StatusUnprocessableEntity, "Choose one of your active standard keys (create one on the Keys page).")
		return
	}
	if file == nil || file.FileName() == "" {
		refuse(http.StatusUnprocessableEntity, "Choose the file to upload.")
		return
	}
	format, ok := formatOf(d.Format, file.FileName())
	if !ok {
		refuse(http.StatusUnprocessableEntity, "Choose the file's format: CSV, NDJSON or one address a line.")
		return
	}
	claim, err := h.claimUpload(ctx, s.AccountID, form.Get(uploadTokenField))
	switch {
	case errors.Is(err, errUploadPending):
		refuse(http.StatusConflict, "This form was already sent, and that upload has not arrived yet: it appears below once it has. "+
			"If it is not there within half an hour, it was lost on the way: reload this page and upload the file again.")
		return
	case err != nil:
		discardBody(w, r)
		h.failure(w, r, s, err)
		return
	case claim.listID != "":
		// A second POST of the same form: the first one's list, not a second upload or charge.
		discardBody(w, r)
		http.Redirect(w, r, Prefix+"/lists/"+claim.listID+"?done=uploaded", http.StatusSeeOther)
		return
	}
	name := d.Name
	if name == "" {
		// Named after its file, as the CLI names an upload; only in the request, so that a
		// refused form still shows the name field as the user left it.
		name = listname.FromBrowser(file.FileName())
	}
	// The upload slots count the browser's address, as the API counts its client's, so that
	// what the slots bound per address is not one address shared by every dashboard user.
	address := ""
	if a, ok := clientAddr(r, h.cfg.TrustedProxies); ok {
		address = a.String()
	}
	var l list.List
	err = verification.CheckListFields(d.Column, name)
	if err == nil {
		l, err = h.verify.UploadList(ctx, verification.ListUpload{Caller: h.caller(p), Format: format, Column: d.Column,
			Name: name, Address: address, Size: -1}, file)
	}
	if err != nil {
		h.releaseUpload(ctx, claim)
		var busy *verification.UploadBusyError
		if errors.As(err, &busy) && busy.Holders != nil {
			h.log.Warn("dashboard upload refused: no upload slot", "account", busy.Account, "address", busy.Address,
				"reason", busy.Reason, "holders", busy.Holders)
		}
		pr := h.problemOf(r, err)
		h.refused(p, "", pr)
		passRetryAfter(w, pr)
		refuse(refusalStatus(pr), problemText(pr))
		return
	}
	h.recordUpload(ctx, claim, l.ID.String())
	http.Redirect(w, r, Prefix+"/lists/"+l.ID.String()+"?done=uploaded", http.StatusSeeOther)
}

// The upload form's one-time token (migrations/00016): the page puts a fresh one in every form
// it renders, and the upload claims it before it hands the file to the verification service.
const uploadTokenField = "upload_token"

// uploadWait bounds how long a second POST of a form waits for the first one's list, and
// uploadPoll is how often it looks.
const (
	uploadWait = 60 * time.Second
	uploadPoll = 200 * time.Millisecond
	// uploadAbandoned is past the longest an upload can be on its way: the API's 10 minutes to
	// receive the file and 10 to import it (docs/lists.md, "Limits"), with a margin.
	uploadAbandoned = 25 * time.Minute
)

var errUploadPending = errors.New("the form's first upload is still on its way")

// uploadClaim is this request's hold on a form's token: held (this request uploads, and records
// its list or gives the token back), or the list an earlier POST of the form created.
type uploadClaim struct {
	account string
	sum     []byte // the token's SHA-256; nil for a form without a token
	listID  string
}

// claimUpload claims the form's token for this request. If an earlier POST of the same form
// holds it, it waits (up to uploadWait) for that one to finish: its list is the answer, and if
// it failed, it gave the token back and this request claims it and uploads its own copy of the
// file. A form without a token (one rendered before tokens existed) uploads unguarded.
func (h *Handler) claimUpload(ctx context.Context, accountID, token string) (uploadClaim, error) {
	c := uploadClaim{account: accountID}
	if token == "" {
		return c, nil
	}
	c.sum = tokenHash(token)
	if _, err := h.pool.Exec(ctx, `
		DELETE FROM dashboard_upload_tokens WHERE (account_id, token_hash) IN (
			SELECT account_id, token_hash FROM dashboard_upload_tokens
			WHERE created_at < now() - interval '1 day' LIMIT 100)`); err != nil {
		h.log.Warn("dashboard: clear old upload tokens", "err", err)
	}
	deadline := time.Now().Add(uploadWait)
	for {
		tag, err := h.pool.Exec(ctx, `INSERT INTO dashboard_upload_tokens (account_id, token_hash) VALUES ($1, $2)
			ON CONFLICT DO NOTHING`, accountID, c.sum)
		if err != nil {
			return c, err
		}
		if tag.RowsAffected() == 1 {
			return c, nil
		}
		var listID *string
		err = h.pool.QueryRow(ctx, `SELECT list_id::text FROM dashboard_upload_tokens WHERE account_id = $1 AND token_hash = $2`,
			accountID, c.sum).Scan(&listID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // given back a moment ago: claim it
		case err != nil:
			return c, err
		case listID != nil:
			c.listID = *listID
			return c, nil
		}
		// A claim older than any upload can take (received, then imported) belongs to one that
		// died on the way (a replica killed mid-upload): this POST takes it over.
		tag, err = h.pool.Exec(ctx, `DELETE FROM dashboard_upload_tokens WHERE account_id = $1 AND token_hash = $2
			AND list_id IS NULL AND created_at < now() - make_interval(secs => $3)`, accountID, c.sum, uploadAbandoned.Seconds())
		if err != nil {
			return c, err
		}
		if tag.RowsAffected() == 1 {
			continue
		}
		if time.Now().After(deadline) {
			return c, errUploadPending
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(uploadPoll):
		}
	}
}

// recordUpload notes the list the claimed upload created, for a second POST of its form to find.
// It runs even if the browser has gone (a double click cancels the first request): the list
// exists, and the second request is waiting for it.
func (h *Handler) recordUpload(ctx context.Context, c uploadClaim, listID string) {
	if c.sum == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := h.pool.Exec(ctx, `UPDATE dashboard_upload_tokens SET list_id = $3 WHERE account_id = $1 AND token_hash = $2`,
		c.account, c.sum, listID); err != nil {
		h.log.Warn("dashboard: record upload token", "err", err)
	}
}

// releaseUpload gives back the token of an upload that created no list, so that a second POST of
// the form, waiting in claimUpload, uploads its own copy.
func (h *Handler) releaseUpload(ctx context.Context, c uploadClaim) {
	if c.sum == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := h.pool.Exec(ctx, `DELETE FROM dashboard_upload_tokens WHERE account_id = $1 AND token_hash = $2 AND list_id IS NULL`,
		c.account, c.sum); err != nil {
		h.log.Warn("dashboard: release upload token", "err", err)
	}
}

// getList reads list id as the account sees it: another account's list, like a missing one, is
// list.ErrNotFound.
func (h *Handler) getList(ctx context.Context, p auth.Principal, id uuid.UUID) (list.List, error) {
	return h.verify.List(ctx, p.AccountID, id)
}

// listPageData is a list's page: the list, and whether it asks to confirm its deletion.
type listPageData struct {
	listView
	ConfirmDelete bool
}

// Refresh says whether the page reloads itself: while the list runs, but not while it asks
// whether to delete it.
func (d listPageData) Refresh() bool { return d.Running() && !d.ConfirmDelete }

// listPage shows a list; with ?confirm=delete it asks whether to delete it (listAction).
func (h *Handler) listPage(w http.ResponseWriter, r *http.Request, s *session) {
	p, id, ok := h.listTarget(w, r, s)
	if !ok {
		return
	}
	h.listAnswer(w, r, s, p, id, http.StatusOK, "", r.URL.Query().Get("confirm") == "delete")
}

// listAnswer renders list id's page with status and msg, an error of an action on it.
func (h *Handler) listAnswer(w http.ResponseWriter, r *http.Request, s *session, p auth.Principal, id uuid.UUID, status int, msg string, confirm bool) {
	got, ok := h.readList(w, r, s, p, id)
	if !ok {
		return
	}
	l := h.view(got)
	title := l.Name
	if title == "" {
		title = "List " + l.ID[:8]
	}
	n := notice(r)
	if r.URL.Query().Get("done") == "uploaded" && !l.Running() {
		n = "The list was uploaded, and its verification is over."
	}
	if msg != "" {
		n = ""
	}
	h.render(w, r, status, "list", &view{Title: title, Nav: "lists", Session: s, Error: msg, Notice: n,
		Data: listPageData{listView: l, ConfirmDelete: confirm}})
}

// readList reads list id for its page or its download. When it answers false it has already
// answered: the not-found page, the outage page of a list store that did not answer, or a
// failure. Both routes answer a list they cannot read alike, so that rule is written once.
func (h *Handler) readList(w http.ResponseWriter, r *http.Request, s *session, p auth.Principal, id uuid.UUID) (list.List, bool) {
	l, err := h.getList(r.Context(), p, id)
	if errors.Is(err, list.ErrNotFound) {
		h.listNotFound(w, r, s)
		return list.List{}, false
	}
	if err != nil {
		if pr := problems.OfList(err); pr == nil || !h.unavailable(w, r, s, pr) {
			h.failure(w, r, s, fmt.Errorf("get list: %w", err))
		}
		return list.List{}, false
	}
	return l, true
}

func (h *Handler) listNotFound(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusNotFound, "message", &view{Title: "List not found", Nav: "lists", Session: s,
		Error: "There is no such list in your account. Finished lists are deleted when their results expire."})
}

// listTarget is the list a list route names and the principal its service calls run as; when it
// answers false it has already answered (no such list, or a failure).
func (h *Handler) listTarget(w http.ResponseWriter, r *http.Request, s *session) (auth.Principal, uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.listNotFound(w, r, s)
		return auth.Principal{}, uuid.Nil, false
	}
	p, _, _, err := h.principal(r.Context(), s, "")
	if err != nil {
		h.failure(w, r, s, err)
		return auth.Principal{}, uuid.Nil, false
	}
	return p, id, true
}

// downloadList streams a list's results, as GET /v1/email/lists/{id}/results gives them, straight
// to the browser, which saves them under the API's file name (Content-Disposition). The list is
// looked up first, so a missing one gets a page instead of an error file.
func (h *Handler) downloadList(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	p, id, ok := h.listTarget(w, r, s)
	if !ok {
		return
	}
	format := r.URL.Query().Get("format")
	if format != "ndjson" {
		format = "csv"
	}
	l, ok := h.readList(w, r, s, p, id)
	if !ok {
		return
	}
	// A person downloads the file to open it, most often in a spreadsheet: formula cells are
	// always escaped (docs/lists.md, "Formula cells"). The file is the API's results download,
	// headers included (internal/api, listResults).
	ctx, cancel := context.WithTimeout(ctx, listExportBudget)
	defer cancel()
	out, name := list.CSV, "mailvet-list-"+l.ID.String()
	hd := w.Header()
	if format == "ndjson" {
		out = list.NDJSON
		hd.Set("Content-Type", "application/x-ndjson")
		hd.Set("Content-Disposition", `attachment; filename="`+name+`.ndjson"`)
	} else {
		hd.Set("Content-Type", "text/csv; charset=utf-8")
		hd.Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	}
	hd.Set("Mailvet-List-State", string(l.State))
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	if err := h.verify.ExportList(ctx, l, out, nil, list.EscapeFormulas, w, flush); err != nil {
		// The status line is gone: end the response without its terminating chunk, so that the
		// browser sees an incomplete download instead of a file that looks whole.
		h.log.Error("dashboard: list results", "list_id", l.ID, "err", redact.Peer(err))
		panic(http.ErrAbortHandler)
	}
}

// listExportBudget bounds the database work of one download of the largest list, as the API's
// (internal/api, listExportBudget).
const listExportBudget = 30 * time.Minute

// listAction cancels a list (remove false) or deletes it (remove true), as the API's routes do.
// A deletion must be confirmed: a POST without the confirmation form's field goes to the page
// that asks, so no single click deletes. A refusal (a list that finished meanwhile, in another
// tab) is shown on the list's page.
func (h *Handler) listAction(remove bool, done string) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		ctx := r.Context()
		p, id, ok := h.listTarget(w, r, s)
		if !ok {
			return
		}
		page := Prefix + "/lists/" + id.String()
		if remove && r.PostForm.Get("confirm") != "yes" {
			// Another account's list, like a missing one, is not found at this step either.
			if _, err := h.getList(ctx, p, id); errors.Is(err, list.ErrNotFound) {
				h.listNotFound(w, r, s)
				return
			}
			http.Redirect(w, r, page+"?confirm=delete", http.StatusSeeOther)
			return
		}
		var err error
		if remove {
			err = h.verify.DeleteList(ctx, p.AccountID, id)
		} else {
			_, err = h.verify.CancelList(ctx, p.AccountID, id)
		}
		if errors.Is(err, list.ErrNotFound) {
			h.listNotFound(w, r, s)
			return
		}
		if err != nil {
			pr := h.problemOf(r, err)
			if h.unavailable(w, r, s, pr) {
				return
			}
			passRetryAfter(w, pr)
			h.listAnswer(w, r, s, p, id, refusalStatus(pr), problemText(pr), false)
			return
		}
		if remove {
			http.Redirect(w, r, Prefix+"/lists?done="+done, http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, page+"?done="+done, http.StatusSeeOther)
	}
}
