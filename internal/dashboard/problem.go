package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
	problems "github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/verification"
)

// The one error mapping is imported as problems: password.go's problem is a sentence of a form.

// problemOf is what the page says of err, an error of the verification service: the one error
// mapping the API's envelopes come from (internal/problem), so the page states the same message,
// limit and wait as the API would. An error the mapping does not know is logged in full and
// shown as the API shows it, an internal error.
func (h *Handler) problemOf(r *http.Request, err error) *problems.Problem {
	p := problems.Upload(err)
	if p == nil {
		p = problems.OfList(err)
	}
	if p == nil {
		h.log.Error("dashboard request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return problems.Internal()
	}
	if p.Cause != nil {
		h.log.Warn("dashboard request refused: dependency unavailable", "method", r.Method, "path", r.URL.Path, "err", p.Cause)
	}
	return p
}

// problemText is what the page says for a refusal: the mapping's message, which is about the
// request (the file, the address, the limit reached), and advice for someone using the dashboard
// instead of the mapping's action, which speaks of the API's routes, fields and headers.
func problemText(p *problems.Problem) string {
	return strings.TrimSpace(p.Message + " " + dashboardAction(p, retryAfter(p)))
}

// retryAfter is the problem's Retry-After in seconds, 0 when it has none.
func retryAfter(p *problems.Problem) int {
	n, err := strconv.Atoi(p.Header.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// extraInt and extraTime read the extra fields of a refusal (docs/errors.md): the limit, the
// use, and when the quota renews.
func extraInt(p *problems.Problem, name string) int {
	n, _ := p.Extra[name].(int)
	return n
}

func extraTime(p *problems.Problem, name string) (time.Time, bool) {
	s, _ := p.Extra[name].(string)
	t, err := time.Parse(time.RFC3339, s)
	return t, err == nil
}

// dashboardAction says what to do about refusal p in the dashboard's terms: what to click or
// wait for. Codes without advice of their own keep the message alone.
func dashboardAction(p *problems.Problem, retryAfter int) string {
	switch p.Code {
	case problems.CodeRateLimitExceeded:
		if strings.HasPrefix(p.Action, "Split") {
			return fmt.Sprintf("Send at most %d addresses at a time.", extraInt(p, "limit"))
		}
		return tryAgainIn(retryAfter) + "."
	case problems.CodeMonthlyQuotaExceeded:
		if strings.HasPrefix(p.Action, "Split") { // larger than the whole quota: it can never pass
			return fmt.Sprintf("Split it into lists of at most %d addresses, or upgrade on the Billing page.", extraInt(p, "limit"))
		}
		renews := "at the start of next month"
		if t, ok := extraTime(p, "reset_at"); ok {
			renews = "on " + dateText(t)
		}
		if left := extraInt(p, "limit") - extraInt(p, "used"); left > 0 { // the request is larger than what is left
			return fmt.Sprintf("Verify at most %d more addresses, wait until the quota renews %s, or upgrade on the Billing page.", left, renews)
		}
		return fmt.Sprintf("Wait until the quota renews %s, or upgrade on the Billing page.", renews)
	case problems.CodePaymentRequired:
		return "Raise or remove the spend cap on the Billing page, or verify fewer addresses this period."
	case problems.CodeInvalidRequest:
		return "Correct it and try again."
	case problems.CodePayloadTooLarge:
		return "Split the file into several smaller lists; nothing was stored or charged."
	case problems.CodeRequestTimeout:
		return "Upload the file again; on a slow connection, split it into smaller lists."
	case problems.CodeServiceUnavailable, problems.CodeQuotaCheckFailed:
		return tryAgainIn(retryAfter) + "; nothing was charged."
	case problems.CodeListFinished:
		return "There is nothing to cancel: download its results, or delete it."
	case problems.CodeListNotFound:
		return "Finished lists are deleted when their results expire."
	case problems.CodeInternal, problems.CodeDatastore:
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

// passRetryAfter puts the refusal's Retry-After (a 429 or 503) on the page that shows it, so the
// browser and any script driving it see when to try again, as an API client would.
func passRetryAfter(w http.ResponseWriter, p *problems.Problem) {
	if v := p.Header.Get("Retry-After"); v != "" {
		w.Header().Set("Retry-After", v)
	}
}

// refusalStatus is the page's status for a refusal: the mapping's, which is always an error.
func refusalStatus(p *problems.Problem) int {
	if p.Status < 400 {
		return http.StatusBadGateway
	}
	return p.Status
}

// unavailable shows a 503 (a dependency down) as a 503 page with its Retry-After and words, and
// reports whether p was one: a page that cannot be built right now is an outage to wait out, not
// a failure of ours.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, s *session, p *problems.Problem) bool {
	if p.Status != http.StatusServiceUnavailable {
		return false
	}
	passRetryAfter(w, p)
	h.render(w, r, http.StatusServiceUnavailable, "message", &view{Title: "Temporarily unavailable", Session: s,
		Error: problemText(p)})
	return true
}

// principal is the signed-in account acting with one of its own active standard keys. keyID ""
// is the account without a key, for the list pages that read, which use none. Another account's
// key id, or a revoked one, is no key at all (ok false).
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

// caller is principal p as the verification service names it, with its plan's limits: the ones
// the API applies to a request with p's key.
func (h *Handler) caller(p auth.Principal) verification.Caller {
	return verification.Caller{Account: p.AccountID, Key: p.KeyID, Tier: p.Tier, Limits: h.cfg.Plans.Of(p.Tier), Sandbox: p.Sandbox()}
}

// refused reports a refusal of a request the dashboard made for p to the API server's metering
// (Deps.Refused): route is the usage log's name of a verify request, "" for a list's.
func (h *Handler) refused(p auth.Principal, route string, pr *problems.Problem) {
	if h.onRefusal != nil {
		h.onRefusal(Refusal{AccountID: p.AccountID, KeyID: p.KeyID, Route: route, Code: pr.Code, ItemKey: uuid.NewString(), Sandbox: p.Sandbox()})
	}
}
