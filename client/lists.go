package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Bulk lists (docs/lists.md): upload a file, follow its progress, download its rows with their
// results. The list routes take a standard key.

// listContentTypes are the Content-Types of the upload formats (docs/lists.md, "Uploading").
var listContentTypes = map[string]string{
	ListCSV:    "text/csv",
	ListNDJSON: "application/x-ndjson",
	ListText:   "text/plain",
}

// DefaultListPoll is how often WaitList reads a list when its poll interval is 0.
const DefaultListPoll = time.Second

// UploadList uploads a file of addresses as a list (POST /v1/email/lists) and returns the list,
// queued or already running. The file is streamed from body as it is read, never held whole in
// memory, so a file of any size up to the API's limits (1,000,000 rows, 100 MB by default) goes
// through. If body is an io.Closer, UploadList does not close it.
//
// With WithRetryOnRateLimit(true) an upload is sent again (a 503, a lost answer) only when body
// can be replayed: an io.Seeker (an *os.File, a *bytes.Reader, a *strings.Reader) is sought back
// to where it was when UploadList was called, and a body not read yet (a connection refused) is
// sent as it is; the Idempotency-Key, the same on each attempt, has the API store the list once.
// Any other reader (a pipe, standard input, an io.MultiReader) is sent once, and an answer that
// would be retried is returned. The per-minute rate limit does not apply to lists, so a 429 here
// is monthly_quota_exceeded, which waiting cannot cure. WithTimeout does
// not bound an upload either, because the API answers only once it has read and stored the whole
// file: bound it with ctx. A file the API cannot read is an *Error with Code invalid_request and,
// when one line is at fault, its Line. Nothing is stored or charged then.
func (c *Client) UploadList(ctx context.Context, body io.Reader, opts ListUpload) (List, error) {
	format := opts.Format
	if format == "" {
		format = ListCSV
	}
	contentType, ok := listContentTypes[format]
	if !ok {
		return List{}, fmt.Errorf("mailvet: UploadList: format %q is not csv, ndjson or text", opts.Format)
	}
	v := url.Values{}
	if opts.Column != "" {
		v.Set("column", opts.Column)
	}
	if opts.Name != "" {
		v.Set("name", opts.Name)
	}
	if opts.WebhookURL != "" {
		v.Set("webhook_url", opts.WebhookURL)
	}
	path := "/v1/email/lists"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	up := &upload{body: body, contentType: contentType, header: http.Header{}}
	if opts.WebhookSecret != "" {
		// A header rather than the query string, which ends up in proxy logs (docs/lists.md).
		up.header.Set("Mailvet-Webhook-Secret", opts.WebhookSecret)
	}
	r := request{http.MethodPost, path, nil}
	a, err := c.sendUpload(ctx, r, up, http.StatusAccepted, false)
	if err != nil {
		return List{}, err
	}
	defer a.release()
	var l List
	if err := decodeJSON(a, r, &l); err != nil {
		return List{}, err
	}
	return l, nil
}

// List reads a list: its state, counts, progress, rate and ETA (GET /v1/email/lists/{id}).
func (c *Client) List(ctx context.Context, id string) (List, error) {
	var l List
	err := c.call(ctx, request{http.MethodGet, "/v1/email/lists/" + pathEscape(id), nil}, http.StatusOK, &l)
	return l, err
}

// Lists reads one page of the account's lists, newest first (GET /v1/email/lists).
func (c *Client) Lists(ctx context.Context, q ListsPage) (ListPage, error) {
	var p ListPage
	err := c.call(ctx, request{http.MethodGet, pagePath("/v1/email/lists", nil, q.Limit, q.Cursor), nil}, http.StatusOK, &p)
	return p, err
}

// ListResults opens the download of a list's rows with their results, in input order
// (GET /v1/email/lists/{id}/results): CSV (the input's columns, then the result's) or NDJSON
// (the input's fields and a result object), as docs/lists.md, "Results", describes. The caller
// reads the stream and closes it. WithTimeout bounds the time until the download starts; reading
// it is bounded by ctx only. A download the server could not finish ends with an error from
// Read (io.ErrUnexpectedEOF), never with a clean io.EOF, so a short file is never taken for a
// whole one. The download is available while the list runs: rows not verified yet have empty
// result columns, or a null result. The bytes are the server's: a CSV with formulas escaped (the
// default; ResultsOptions.RawFormulas) begins with UTF-8's byte-order mark.
func (c *Client) ListResults(ctx context.Context, id string, opts ResultsOptions) (io.ReadCloser, error) {
	v := url.Values{}
	switch opts.Format {
	case "", ListCSV:
		v.Set("format", ListCSV)
	case ListNDJSON:
		v.Set("format", ListNDJSON)
	default:
		return nil, fmt.Errorf("mailvet: ListResults: format %q is not csv or ndjson", opts.Format)
	}
	if len(opts.Statuses) > 0 {
		v.Set("status", strings.Join(opts.Statuses, ","))
	}
	if opts.RawFormulas {
		v.Set("escape_formulas", "false")
	}
	a, err := c.send(ctx, request{http.MethodGet, "/v1/email/lists/" + pathEscape(id) + "/results?" + v.Encode(), nil}, http.StatusOK, true)
	if err != nil {
		return nil, err
	}
	return &download{a: a}, nil
}

// download is a results body: closing it releases the attempt, and a read that fails (the
// connection cut, WithTimeout) says so with the response's request id; the cause stays
// reachable with errors.Is (io.ErrUnexpectedEOF, ErrTimeout).
type download struct{ a *attempt }

func (d *download) Read(p []byte) (int, error) {
	n, err := d.a.resp.Body.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("mailvet: results download%s: %w", requestIDNote(d.a.resp.Header.Get("X-Request-Id")), timeoutCause(d.a.ctx, err))
	}
	return n, err
}

func (d *download) Close() error {
	d.a.release()
	return nil
}

// CancelList stops a queued or running list and returns it, canceled
// (POST /v1/email/lists/{id}/cancel). What was verified stays downloadable; the rest is not
// billed. A list that has already finished is an *Error with Code list_finished.
func (c *Client) CancelList(ctx context.Context, id string) (List, error) {
	var l List
	err := c.call(ctx, request{http.MethodPost, "/v1/email/lists/" + pathEscape(id) + "/cancel", nil}, http.StatusOK, &l)
	return l, err
}

// DeleteList deletes a list's rows, results and counts for good (DELETE /v1/email/lists/{id});
// a list still running is canceled first. When an attempt's answer was lost and the retry is
// answered list_not_found, the lost attempt deleted it, and DeleteList returns nil.
func (c *Client) DeleteList(ctx context.Context, id string) error {
	return c.call(ctx, request{http.MethodDelete, "/v1/email/lists/" + pathEscape(id), nil}, http.StatusNoContent, nil)
}

// WaitList reads the list every poll (DefaultListPoll when poll is 0 or less) until it reaches
// a final state, and returns it. The final state may be completed, canceled or failed: check
// List.State. progress, if not nil, is called with every reading, the last one included. An
// error reading the list ends the wait with that error and the last list read; so does ctx.
func (c *Client) WaitList(ctx context.Context, id string, poll time.Duration, progress func(List)) (List, error) {
	if poll <= 0 {
		poll = DefaultListPoll
	}
	var last List
	for {
		l, err := c.List(ctx, id)
		if err != nil {
			return last, err
		}
		last = l
		if progress != nil {
			progress(l)
		}
		if l.Done() {
			return l, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, fmt.Errorf("mailvet: waiting for list %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}
