package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
)

// answer is the API's response to an in-process request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// envelope is the API's error envelope (docs/errors.md), with the extra fields the dashboard
// words its own advice from: the upload's line, and the limit, use and reset of a refusal.
type envelope struct {
	Error, Message, Action string
	Line                   int
	Limit, Used            int
	ResetAt                string `json:"reset_at"`
}

// problemText is what the page says for an error answer: the API's message, which is about the
// request (the file, the address, the limit reached), and advice for someone using the
// dashboard instead of the API's action, which speaks of routes, fields and headers.
func (a answer) problemText() string {
	var e envelope
	if json.Unmarshal(a.body, &e) != nil || e.Message == "" {
		return "The request did not complete. Try again in a moment."
	}
	return strings.TrimSpace(e.Message + " " + dashboardAction(e, a.retryAfter()))
}

// retryAfter is the answer's Retry-After in seconds, 0 when it has none.
func (a answer) retryAfter() int {
	n, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// dashboardAction says what to do about refusal e in the dashboard's terms: what to click or
// wait for. Codes without advice of their own keep the API's message alone.
func dashboardAction(e envelope, retryAfter int) string {
	switch e.Error {
	case "rate_limit_exceeded":
		if strings.HasPrefix(e.Action, "Split") {
			return fmt.Sprintf("Send at most %d addresses at a time.", e.Limit)
		}
		return tryAgainIn(retryAfter) + "."
	case "monthly_quota_exceeded":
		renews := "at the start of next month"
		if t, err := time.Parse(time.RFC3339, e.ResetAt); err == nil {
			renews = "on " + dateText(t)
		}
		if left := e.Limit - e.Used; left > 0 { // the request is larger than what is left
			return fmt.Sprintf("Verify at most %d more addresses, wait until the quota renews %s, or upgrade on the Billing page.", left, renews)
		}
		return fmt.Sprintf("Wait until the quota renews %s, or upgrade on the Billing page.", renews)
	case "payment_required":
		return "Raise or remove the spend cap on the Billing page, or verify fewer addresses this period."
	case "invalid_request":
		return "Correct it and try again."
	case "payload_too_large":
		return "Split the file into several smaller lists; nothing was stored or charged."
	case "request_timeout":
		return "Upload the file again; on a slow connection, split it into smaller lists."
	case "service_unavailable", "quota_check_failed":
		return tryAgainIn(retryAfter) + "; nothing was charged."
	case "list_finished":
		return "There is nothing to cancel: download its results, or delete it."
	case "list_not_found":
		return "Finished lists are deleted when their results expire."
	case "missing_api_key", "invalid_api_key", "key_not_found", "wrong_key_type":
		return "Choose one of your active keys, or create one on the Keys page."
	case "internal_error", "datastore_error":
		return "Try again in a moment; if it keeps failing, contact support."
	}
	return ""
}

// tryAgainIn says when to try again, from a Retry-After in seconds (0: unknown).
func tryAgainIn(seconds int) string {
	if seconds <= 0 {
		return "Try again in a moment"
	}
	return "Try again in " + durationText(seconds)
}

// durationText says a number of seconds as the pages do: "45 s", "12 min", "3 h 5 min".
func durationText(seconds int) string {
	switch {
	case seconds < 60:
		return fmt.Sprintf("%d s", max(seconds, 1))
	case seconds < 3600:
		return fmt.Sprintf("%d min", (seconds+59)/60)
	}
	h, m := seconds/3600, (seconds%3600+59)/60
	if m == 60 {
		h, m = h+1, 0
	}
	if m == 0 {
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d h %d min", h, m)
}

// dateText is a time as every dashboard page shows one ("2026-11-23 08:41 UTC").
func dateText(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

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
	return h.callFrom(ctx, nil, p, method, target, contentType, body)
}

// callFrom is call on behalf of the browser's request from: the API sees from's peer address and
// X-Forwarded-For, so that what it bounds per client address (upload slots, internal/api
// spool.go) counts the browser's address, not one shared by every dashboard user.
func (h *Handler) callFrom(ctx context.Context, from *http.Request, p auth.Principal, method, target, contentType string, body io.Reader) answer {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return answer{status: http.StatusInternalServerError}
	}
	if from != nil {
		req.RemoteAddr = from.RemoteAddr
		if xff := from.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			req.Header["X-Forwarded-For"] = xff
		}
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
	p = auth.Principal{AccountID: a.ID, Tier: a.Tier, Kind: auth.KindStandard, Mode: auth.ModeLive}
	if keyID == "" {
		return p, keys, true, nil
	}
	for _, k := range keys {
		if k.ID == keyID {
			// The key's mode goes with it: a sandbox key chosen in the dashboard is answered by
			// the sandbox, as through the API (docs/sandbox.md).
			p.KeyID, p.Mode = k.ID, k.Mode
			return p, keys, true, nil
		}
	}
	return p, keys, false, nil
}
