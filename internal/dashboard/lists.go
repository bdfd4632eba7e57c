package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
)

// The list pages (docs/dashboard.md, "Lists") are the bulk-list API (docs/lists.md) behind forms:
// every call goes through the API's own routes with api.Server.ServeAs.

// Bounds of the upload form besides its file, which the API holds to the list limits: its
// fields (key, name, format, column, CSRF token) are a few hundred bytes.
const (
	uploadSlack     = 64 << 10 // the fields and the multipart framing, over the file's limit
	maxUploadFields = 16
	maxFieldBytes   = 1 << 10
)

// listView is the part of a list (docs/lists.md, "Progress") the pages show.
type listView struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	State       string  `json:"state"`
	Format      string  `json:"format"`
	EmailColumn string  `json:"email_column"`
	Rows        int     `json:"rows"`
	Unique      int     `json:"unique"`
	Verified    int     `json:"verified"`
	Progress    float64 `json:"progress"`
	ETASeconds  *int    `json:"eta_seconds"`
	Error       *string `json:"error"`
	CreatedAt   string  `json:"created_at"`
	FinishedAt  *string `json:"finished_at"`
	ExpiresAt   *string `json:"expires_at"`
	Counts      struct {
		ByStatus map[string]int `json:"by_status"`
	} `json:"counts"`
}

// Percent is the progress for the progress bar, 0 to 100.
func (l listView) Percent() float64 { return l.Progress * 100 }

// Running says whether the list is still moving, so the page refreshes itself.
func (l listView) Running() bool { return l.State == "queued" || l.State == "running" }

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

type listsData struct {
	Keys  []account.Key
	Lists []listView
	Next  string
	KeyID string
	Name  string
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
	d.MaxSize, d.MaxRows = sizeText(h.cfg.Lists.MaxBytes), h.cfg.Lists.MaxRows
	target := "/v1/email/lists?limit=20"
	if c := r.URL.Query().Get("cursor"); c != "" {
		if _, err := uuid.Parse(c); err == nil {
			target += "&cursor=" + url.QueryEscape(c)
		}
	}
	ans := h.call(ctx, p, http.MethodGet, target, "", nil)
	var page struct {
		Lists      []listView `json:"lists"`
		NextCursor *string    `json:"next_cursor"`
	}
	if h.unavailable(w, r, s, ans) {
		return
	}
	if ans.status != http.StatusOK || json.Unmarshal(ans.body, &page) != nil {
		h.failure(w, r, s, errors.New("list lists: "+ans.problemText()))
		return
	}
	d.Lists = page.Lists
	if page.NextCursor != nil {
		d.Next = "?cursor=" + url.QueryEscape(*page.NextCursor)
	}
	h.render(w, r, status, "lists", &view{Title: "Lists", Nav: "lists", Session: s, Data: d, Error: msg, Notice: notice(r)})
}

// uploadFormats maps the form's format choice to the API's Content-Type (docs/lists.md).
var uploadFormats = map[string]string{"csv": "text/csv", "ndjson": "application/x-ndjson", "text": "text/plain"}

// formatOf picks the format: the form's choice, else the file name's extension.
func formatOf(choice, filename string) (string, bool) {
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
func readUploadForm(r *http.Request) (url.Values, *multipart.Part, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, err
	}
	form := url.Values{}
	for range maxUploadFields {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return form, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if part.FormName() == "file" {
			return form, part, nil
		}
		v, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
		if err != nil {
			return nil, nil, err
		}
		if len(v) > maxFieldBytes {
			return nil, nil, fmt.Errorf("form field %q over %d bytes", part.FormName(), maxFieldBytes)
		}
		form.Add(part.FormName(), string(v))
	}
	return nil, nil, fmt.Errorf("more than %d form fields before the file", maxUploadFields)
}

// uploadList streams the chosen file to POST /v1/email/lists with the chosen key, as it
// arrives: the dashboard never holds the file, and the API applies the list limits to it
// (docs/lists.md, "Limits"), so a file as large as the API takes can be uploaded here too.
func (h *Handler) uploadList(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	form, file, err := readUploadForm(r)
	if err != nil {
		h.badForm(w, r, s)
		return
	}
	if !sameToken(form.Get(csrfField), s.CSRF) {
		h.csrfFailure(w, r, s)
		return
	}
	d := listsData{KeyID: form.Get("key_id"), Name: form.Get("name")}
	p, _, ok, err := h.principal(ctx, s, d.KeyID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if !ok || d.KeyID == "" {
		h.listsAnswer(w, r, s, http.StatusUnprocessableEntity, "Choose one of your active standard keys (create one on the Keys page).", d)
		return
	}
	if file == nil || file.FileName() == "" {
		h.listsAnswer(w, r, s, http.StatusUnprocessableEntity, "Choose the file to upload.", d)
		return
	}
	ct, ok := formatOf(form.Get("format"), file.FileName())
	if !ok {
		h.listsAnswer(w, r, s, http.StatusUnprocessableEntity, "Choose the file's format: CSV, NDJSON or one address a line.", d)
		return
	}
	q := url.Values{}
	if d.Name != "" {
		q.Set("name", d.Name)
	}
	if c := form.Get("column"); c != "" {
		q.Set("column", c)
	}
	target := "/v1/email/lists"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	ans := h.call(ctx, p, http.MethodPost, target, ct, file)
	if ans.status != http.StatusAccepted {
		status := ans.status
		if status < 400 {
			status = http.StatusBadGateway
		}
		passRetryAfter(w, ans)
		h.listsAnswer(w, r, s, status, ans.problemText(), d)
		return
	}
	var l listView
	if err := json.Unmarshal(ans.body, &l); err != nil || uuid.Validate(l.ID) != nil {
		h.failure(w, r, s, errors.New("upload answer without a list id"))
		return
	}
	http.Redirect(w, r, Prefix+"/lists/"+l.ID+"?done=uploaded", http.StatusSeeOther)
}

// getList fetches the list id as the account sees it through the API: another account's list,
// like a missing one, is the API's 404.
func (h *Handler) getList(ctx context.Context, p auth.Principal, id uuid.UUID) (listView, answer) {
	ans := h.call(ctx, p, http.MethodGet, "/v1/email/lists/"+id.String(), "", nil)
	var l listView
	if ans.status == http.StatusOK && json.Unmarshal(ans.body, &l) != nil {
		ans.status = http.StatusBadGateway
	}
	return l, ans
}

func (h *Handler) listPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	p, id, ok := h.listTarget(w, r, s)
	if !ok {
		return
	}
	l, ans := h.getList(ctx, p, id)
	if ans.status == http.StatusNotFound {
		h.listNotFound(w, r, s)
		return
	}
	if h.unavailable(w, r, s, ans) {
		return
	}
	if ans.status != http.StatusOK {
		h.failure(w, r, s, errors.New("get list: "+ans.problemText()))
		return
	}
	title := l.Name
	if title == "" {
		title = "List " + l.ID[:8]
	}
	n := notice(r)
	if r.URL.Query().Get("done") == "uploaded" && !l.Running() {
		n = "The list was uploaded, and its verification is over."
	}
	h.render(w, r, http.StatusOK, "list", &view{Title: title, Nav: "lists", Session: s, Data: l, Notice: n})
}

func (h *Handler) listNotFound(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusNotFound, "message", &view{Title: "List not found", Nav: "lists", Session: s,
		Error: "There is no such list in your account. Finished lists are deleted when their results expire."})
}

// listTarget is the list a list route names and the principal its API calls run as; when it
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

// downloadList streams the results from GET /v1/email/lists/{id}/results straight to the
// browser, which saves them under the file name the API gives (Content-Disposition). The list is
// looked up first, so a missing one gets a page instead of a JSON error file.
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
	if _, ans := h.getList(ctx, p, id); ans.status != http.StatusOK {
		h.listNotFound(w, r, s)
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/v1/email/lists/"+id.String()+"/results?format="+format, nil)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.api.ServeAs(w, req, p)
}

// listAction cancels or deletes a list through the API.
func (h *Handler) listAction(method, suffix, done string) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		ctx := r.Context()
		p, id, ok := h.listTarget(w, r, s)
		if !ok {
			return
		}
		ans := h.call(ctx, p, method, "/v1/email/lists/"+id.String()+suffix, "", nil)
		switch {
		case ans.status == http.StatusNotFound:
			h.listNotFound(w, r, s)
		case ans.status >= 400:
			passRetryAfter(w, ans)
			h.render(w, r, ans.status, "message", &view{Title: "Lists", Nav: "lists", Session: s, Error: ans.problemText()})
		case suffix == "":
			http.Redirect(w, r, Prefix+"/lists?done="+done, http.StatusSeeOther)
		default:
			http.Redirect(w, r, Prefix+"/lists/"+id.String()+"?done="+done, http.StatusSeeOther)
		}
	}
}
