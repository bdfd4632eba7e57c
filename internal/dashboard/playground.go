package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/verification"
)

// playgroundData is the playground page: the form, and the last answer.
type playgroundData struct {
	Keys   []account.Key
	KeyID  string
	Email  string
	Fields []resultField
	Raw    string
}

// resultField is one field of a verify result with what it means (docs/api.md, "The verify result").
type resultField struct {
	Name, Value, Meaning string
}

var fieldMeanings = []struct{ name, meaning string }{
	{"status", "The verdict: deliverable, undeliverable, catch_all, invalid or unknown."},
	{"valid", "True when the address can receive mail as far as the checks can tell."},
	{"confidence", "How sure the verdict is, from 0 to 1."},
	{"reason", "Why the verdict is what it is, as a stable code."},
	{"failed_check", "The first check that failed, if any."},
	{"disposable", "The domain hands out throwaway addresses."},
	{"role", "The local part names a role (info@, sales@) rather than a person."},
	{"free_provider", "The domain is a free mailbox provider."},
	{"catch_all", "The mail server accepts every address of the domain, so a single address cannot be confirmed."},
	{"smtp_blocked", "The mail server would not talk to the verifier; the SMTP check could not run."},
	{"mx_found", "The domain publishes mail servers (MX records)."},
	{"mx_host", "The mail server that was asked."},
	{"suggestion", "A likely correction for a typing mistake in the domain."},
	{"latency_ms", "How long the verification took, in milliseconds."},
	{"smtp_reply", "The mail server's own reply the verdict was decided on; null when no server was asked."},
}

// fieldValue is how the playground shows a result field: a string without its quotes, and
// smtp_reply as the server wrote it ("550 5.1.1 No such user here") rather than as an object.
func fieldValue(name string, v json.RawMessage) string {
	if name == "smtp_reply" {
		var rep struct {
			Code     int     `json:"code"`
			Enhanced *string `json:"enhanced_code"`
			Text     string  `json:"text"`
		}
		if json.Unmarshal(v, &rep) == nil && rep.Code != 0 {
			parts := []string{strconv.Itoa(rep.Code)}
			if rep.Enhanced != nil {
				parts = append(parts, *rep.Enhanced)
			}
			if rep.Text != "" {
				parts = append(parts, rep.Text)
			}
			return strings.Join(parts, " ")
		}
	}
	return strings.Trim(string(v), `"`)
}

func (h *Handler) playgroundPage(w http.ResponseWriter, r *http.Request, s *session) {
	keys, err := h.accounts.ListStandardKeys(r.Context(), s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "playground", &view{Title: "Playground", Nav: "playground", Session: s,
		Data: playgroundData{Keys: keys}})
}

// playground verifies one address with a key of the account, through the verification service
// as the API's verify route does. The key is looked up among the account's own active standard
// keys, so another account's key id is just "no such key".
func (h *Handler) playground(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	d := playgroundData{KeyID: r.PostForm.Get("key_id"), Email: r.PostForm.Get("email")}
	p, keys, ok, err := h.principal(ctx, s, d.KeyID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d.Keys = keys
	respond := func(status int, msg string) {
		h.render(w, r, status, "playground", &view{Title: "Playground", Nav: "playground", Session: s, Data: d, Error: msg})
	}
	if !ok || d.KeyID == "" {
		respond(http.StatusUnprocessableEntity, "Choose one of your active standard keys (create one on the Keys page).")
		return
	}
	if strings.TrimSpace(d.Email) == "" || len(d.Email) > maxEmailLen {
		respond(http.StatusUnprocessableEntity, "Enter an email address of at most 254 characters.")
		return
	}
	// What the API's JSON decoder refuses before the service sees it (docs/api.md, "Conventions"):
	// text that is not UTF-8, and a NUL, which Postgres would refuse in the usage row.
	if !utf8.ValidString(d.Email) || strings.IndexByte(d.Email, 0) >= 0 {
		respond(http.StatusUnprocessableEntity, "Enter the email address as plain text, without control characters.")
		return
	}
	// The verification service's own request, as the API's POST /v1/email/verify makes it:
	// admitted against the account's rate limit and quota, held, and billed once the result is on
	// the page (docs/architecture.md, "Metering and admission").
	ans, _, err := h.verify.One(ctx, verification.Request{Caller: h.caller(p), Key: uuid.NewString(), Start: time.Now()}, d.Email)
	if err != nil {
		pr := h.problemOf(r, err)
		h.refused(p, "verify", pr)
		passRetryAfter(w, pr)
		respond(refusalStatus(pr), problemText(pr))
		return
	}
	defer ans.Close()                         // a result that did not reach the page is not billed
	body, err := json.Marshal(ans.Results[0]) // the API's answer, field for field
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(body, &res); err != nil {
		h.failure(w, r, s, err)
		return
	}
	for _, f := range fieldMeanings {
		if v, ok := res[f.name]; ok {
			d.Fields = append(d.Fields, resultField{Name: f.name, Value: fieldValue(f.name, v), Meaning: f.meaning})
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		d.Raw = pretty.String()
	}
	// Billed only once the page with the result was written, as the API's answer is: a page that
	// could not be rendered or written (the browser went away) is not owed, and the deferred
	// Close gives its hold back.
	if h.renderPage(w, r, http.StatusOK, "playground", &view{Title: "Playground", Nav: "playground", Session: s, Data: d}) != nil {
		return
	}
	ans.Deliver()
}
