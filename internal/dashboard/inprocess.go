package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
)

// answer is the API's response to an in-process request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// envelope is the API's error envelope (docs/errors.md), with the bulk-list upload's line.
type envelope struct {
	Error, Message, Action string
	Line                   int
}

// problemText is what the page says for an error answer: the API's own message and action.
func (a answer) problemText() string {
	var e envelope
	if json.Unmarshal(a.body, &e) != nil || e.Message == "" {
		return "The request did not complete. Try again in a moment."
	}
	return strings.TrimSpace(e.Message + " " + e.Action)
}

// passRetryAfter copies the API's Retry-After (a 429 or 503) onto the page that shows its answer,
// so the browser and any script driving it see when to try again, as an API client would.
func passRetryAfter(w http.ResponseWriter, a answer) {
	if v := a.header.Get("Retry-After"); v != "" {
		w.Header().Set("Retry-After", v)
	}
}

// unavailable shows the API's 503 (a dependency down) as a 503 page with its Retry-After and
// words, and reports whether a was one: a page that cannot be built right now is an outage to
// wait out, not a failure of ours.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, s *session, a answer) bool {
	if a.status != http.StatusServiceUnavailable {
		return false
	}
	passRetryAfter(w, a)
	h.render(w, r, http.StatusServiceUnavailable, "message", &view{Title: "Temporarily unavailable", Session: s,
		Error: a.problemText()})
	return true
}

// recorder collects an in-process response, up to a bound: the API's JSON answers are small,
// and downloads are streamed to the browser instead (lists.go).
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

const maxRecorded = 4 << 20

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	if r.body.Len()+len(b) > maxRecorded {
		return 0, io.ErrShortWrite
	}
	return r.body.Write(b)
}

// call sends one request to the verify API as p and returns its answer.
func (h *Handler) call(ctx context.Context, p auth.Principal, method, target, contentType string, body io.Reader) answer {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return answer{status: http.StatusInternalServerError}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	h.api.ServeAs(rec, req, p)
	return answer{status: rec.status, header: rec.header, body: rec.body.Bytes()}
}

// principal is the signed-in account acting with one of its own active standard keys. keyID ""
// is the account without a key, for the read-only list routes, which use none. Another
// account's key id, or a revoked one, is no key at all (ok false).
func (h *Handler) principal(ctx context.Context, s *session, keyID string) (p auth.Principal, keys []account.Key, ok bool, err error) {
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		return p, nil, false, err
	}
	keys, err = h.accounts.ListStandardKeys(ctx, s.AccountID)
	if err != nil {
		return p, nil, false, err
	}
	p = auth.Principal{AccountID: a.ID, Tier: a.Tier, Kind: auth.KindStandard}
	if keyID == "" {
		return p, keys, true, nil
	}
	for _, k := range keys {
		if k.ID == keyID {
			p.KeyID = k.ID
			return p, keys, true, nil
		}
	}
	return p, keys, false, nil
}
