package dashboard

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/auth"
)

// keysData is the keys page. New is the key just created, shown this once. KeyToken and ProvToken
// are the one-time tokens of the two create forms (newFormToken). Confirm, when set, makes the page
// the confirmation of a revocation, and nothing else.
type keysData struct {
	Keys         []account.Key
	Max          int
	Provisioning *account.Key
	New          *account.CreatedKey
	Label        string
	// Mode is the create form's mode, kept when the form comes back with an error.
	Mode      string
	KeyToken  string
	ProvToken string
	Confirm   *revokeConfirm
}

// revokeConfirm is the question asked before a key is revoked: the form posts to Action. Replace
// asks instead whether to replace the provisioning key with a new one, a form with ProvToken.
type revokeConfirm struct {
	Key     account.Key
	Action  string
	Replace bool
}

func (h *Handler) keysData(r *http.Request, s *session) (keysData, error) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		return keysData{}, err
	}
	keys, err := h.accounts.ListStandardKeys(ctx, s.AccountID)
	if err != nil {
		return keysData{}, err
	}
	prov, err := h.accounts.ProvisioningKey(ctx, s.AccountID)
	if err != nil {
		return keysData{}, err
	}
	return keysData{Keys: keys, Max: h.cfg.Plans.MaxKeys(a.Tier), Provisioning: prov,
		KeyToken: newFormToken(), ProvToken: newFormToken()}, nil
}

// newFormToken is the one-time token of a rendered create-key form. The page that shows a new
// key is the answer to a POST, so a reload sends the same form again: the token, recorded with
// the key it created (account.Store.CreateStandardKeyOnce), makes that second POST create nothing.
// It needs no secrecy: the CSRF token already ties the POST to the session.
func newFormToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// formToken reads the create form's token. A form without one (a page rendered by an older
// release) creates as before; one that is not a token is refused, so nothing odd is stored.
func formToken(r *http.Request) (string, bool) {
	t := r.PostForm.Get("form_token")
	if len(t) > 64 {
		return "", false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", false
		}
	}
	return t, true
}

const msgStaleForm = "This form is out of date. Reload the page and try again."

// alreadyCreated is what a create form sent twice says: the key exists, its secret is gone.
func alreadyCreated(k account.Key) string {
	return "This key was already created (" + k.Label + ", " + k.Prefix + "); its secret was shown only once — " +
		"if you did not copy it, revoke it and create another."
}

// keysPage is the keys page; ?revoke=<key id> or ?revoke=provisioning makes it the confirmation
// of that revocation, so that a revocation takes two clicks and works without JavaScript.
func (h *Handler) keysPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.keysData(r, s)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if which := r.URL.Query().Get("revoke"); which != "" {
		h.confirmRevoke(w, r, s, d, which)
		return
	}
	if r.URL.Query().Get("replace") == "provisioning" {
		h.confirmReplace(w, r, s, d)
		return
	}
	h.render(w, r, http.StatusOK, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d, Notice: notice(r)})
}

// confirmRevoke renders the question for which, a standard key id of the account or
// "provisioning"; any other key is "no such key", as on revocation itself.
func (h *Handler) confirmRevoke(w http.ResponseWriter, r *http.Request, s *session, d keysData, which string) {
	var c *revokeConfirm
	if which == "provisioning" {
		if d.Provisioning != nil {
			c = &revokeConfirm{Key: *d.Provisioning, Action: Prefix + "/keys/provisioning/revoke"}
		}
	} else if id, err := uuid.Parse(which); err == nil {
		for _, k := range d.Keys {
			if k.ID == id.String() {
				c = &revokeConfirm{Key: k, Action: Prefix + "/keys/" + k.ID + "/revoke"}
			}
		}
	}
	if c == nil {
		h.render(w, r, http.StatusNotFound, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d,
			Error: "There is no such active key in your account."})
		return
	}
	d.Confirm = c
	h.render(w, r, http.StatusOK, "keys", &view{Title: "Revoke key", Nav: "keys", Session: s, Data: d})
}

// confirmReplace renders the question asked before the provisioning key is replaced; without an
// active one there is nothing to replace, and the page offers to create one.
func (h *Handler) confirmReplace(w http.ResponseWriter, r *http.Request, s *session, d keysData) {
	if d.Provisioning == nil {
		h.render(w, r, http.StatusNotFound, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d,
			Error: "There is no active provisioning key to replace."})
		return
	}
	d.Confirm = &revokeConfirm{Key: *d.Provisioning, Action: Prefix + "/keys/provisioning/replace", Replace: true}
	h.render(w, r, http.StatusOK, "keys", &view{Title: "Replace key", Nav: "keys", Session: s, Data: d})
}

// toConfirmation sends a revocation posted without the confirmation's confirm=yes (a page of an
// older release, a crafted form) to the confirmation instead of revoking in one click.
func toConfirmation(w http.ResponseWriter, r *http.Request, which string) {
	http.Redirect(w, r, Prefix+"/keys?"+url.Values{"revoke": {which}}.Encode(), http.StatusSeeOther)
}

// keysAnswer renders the keys page after a POST: with the new key shown once, or with an error.
func (h *Handler) keysAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, created *account.CreatedKey, msg, label string) {
	d, err := h.keysData(r, s)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d.New, d.Label = created, label
	if label != "" {
		d.Mode = r.PostForm.Get("mode")
	}
	h.render(w, r, status, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d, Error: msg})
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, s *session) {
	label := strings.TrimSpace(r.PostForm.Get("label"))
	token, ok := formToken(r)
	if !ok {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, msgStaleForm, label)
		return
	}
	if err := account.CheckLabel(label); err != nil {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, "The label "+strings.TrimPrefix(err.Error(), "label ")+".", label)
		return
	}
	// The mode of the new key (docs/sandbox.md); a form without one (an older page) makes a live key.
	mode := auth.Mode(r.PostForm.Get("mode"))
	if mode == "" {
		mode = auth.ModeLive
	}
	if mode != auth.ModeLive && mode != auth.ModeSandbox {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, "Choose the live or the sandbox mode for the key.", label)
		return
	}
	var k account.CreatedKey
	err := h.audited(r.Context(), func(tx pgx.Tx) error {
		var err error
		k, err = account.NewStore(tx).CreateStandardKeyIn(r.Context(), s.AccountID, label, mode, token, h.cfg.Plans.MaxKeys)
		return err
	}, func() audit.Event { return h.sessionEvent(r, s, audit.KeyCreated, keyDetail(k.Key)) })
	var (
		limit *account.KeyLimitError
		dup   *account.KeyCreatedError
	)
	switch {
	case errors.As(err, &dup):
		h.keysAnswer(w, r, s, http.StatusConflict, nil, alreadyCreated(dup.Key), "")
	case errors.As(err, &limit):
		// 429 as on POST /v1/management/keys (key_limit_reached).
		h.keysAnswer(w, r, s, http.StatusTooManyRequests, nil, "Your plan allows "+strconv.Itoa(limit.Max)+
			" active standard keys. Revoke one before creating another, or upgrade your plan.", label)
	case err != nil:
		h.failure(w, r, s, err)
	default:
		h.keysAnswer(w, r, s, http.StatusCreated, &k, "", "")
	}
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, s *session) {
	// The id is parsed to its canonical form first, as the management API does (internal/api/keys.go).
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.keysAnswer(w, r, s, http.StatusNotFound, nil, "There is no such active key in your account.", "")
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.confirmRevokePost(w, r, s, id.String())
		return
	}
	var revoked account.Key
	err = h.audited(r.Context(), func(tx pgx.Tx) error {
		store := account.NewStore(tx)
		if err := store.RevokeStandardKey(r.Context(), s.AccountID, id.String()); err != nil {
			return err
		}
		var err error
		revoked, err = store.KeyByID(r.Context(), s.AccountID, id.String())
		return err
	}, func() audit.Event { return h.sessionEvent(r, s, audit.KeyRevoked, keyDetail(revoked)) })
	if errors.Is(err, account.ErrKeyNotFound) {
		h.keysAnswer(w, r, s, http.StatusNotFound, nil, "There is no such active key in your account.", "")
		return
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	http.Redirect(w, r, Prefix+"/keys?done=revoked", http.StatusSeeOther)
}

// confirmRevokePost answers a standard key's revocation posted without the confirmation: another
// account's or an unknown key is 404 at once, as before; the account's own key goes to the
// confirmation.
func (h *Handler) confirmRevokePost(w http.ResponseWriter, r *http.Request, s *session, id string) {
	keys, err := h.accounts.ListStandardKeys(r.Context(), s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	for _, k := range keys {
		if k.ID == id {
			toConfirmation(w, r, id)
			return
		}
	}
	h.keysAnswer(w, r, s, http.StatusNotFound, nil, "There is no such active key in your account.", "")
}

func (h *Handler) createProvisioningKey(w http.ResponseWriter, r *http.Request, s *session) {
	token, ok := formToken(r)
	if !ok {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, msgStaleForm, "")
		return
	}
	var k account.CreatedKey
	err := h.audited(r.Context(), func(tx pgx.Tx) error {
		var err error
		k, err = account.NewStore(tx).CreateProvisioningKeyOnce(r.Context(), s.AccountID, token)
		return err
	}, func() audit.Event { return h.sessionEvent(r, s, audit.KeyCreated, keyDetail(k.Key)) })
	var dup *account.KeyCreatedError
	switch {
	case errors.As(err, &dup):
		h.keysAnswer(w, r, s, http.StatusConflict, nil, alreadyCreated(dup.Key), "")
	case errors.Is(err, account.ErrProvisioningKeyExists):
		h.keysAnswer(w, r, s, http.StatusConflict, nil, "Your account already has an active provisioning key. Revoke it first to create a new one.", "")
	case err != nil:
		h.failure(w, r, s, err)
	default:
		h.keysAnswer(w, r, s, http.StatusCreated, &k, "", "")
	}
}

func (h *Handler) revokeProvisioningKey(w http.ResponseWriter, r *http.Request, s *session) {
	if r.PostForm.Get("confirm") != "yes" {
		prov, err := h.accounts.ProvisioningKey(r.Context(), s.AccountID)
		if err != nil {
			h.failure(w, r, s, err)
			return
		}
		if prov != nil {
			toConfirmation(w, r, "provisioning")
			return
		}
	}
	// The key is read before it is revoked, to name it in the audit event; a revocation that
	// found no key changed nothing and records nothing.
	var n int
	err := pgx.BeginFunc(r.Context(), h.pool, func(tx pgx.Tx) error {
		store := account.NewStore(tx)
		prov, err := store.ProvisioningKey(r.Context(), s.AccountID)
		if err != nil {
			return err
		}
		if n, err = store.RevokeProvisioningKey(r.Context(), s.AccountID); err != nil || n == 0 || prov == nil {
			return err
		}
		return audit.Record(r.Context(), tx, h.sessionEvent(r, s, audit.KeyRevoked, keyDetail(*prov)))
	})
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	done := "prov-gone"
	if n == 0 {
		done = "no-revoked"
	}
	http.Redirect(w, r, Prefix+"/keys?done="+done, http.StatusSeeOther)
}

// replaceProvisioningKey revokes the provisioning key and creates its successor in one
// transaction with both audit events (account.Store.ReplaceProvisioningKeyOnce): the account
// never has two active provisioning keys (docs/api.md, "Authentication"), and a failure at any
// step leaves the old key working instead of none. Posted without confirm=yes it goes to the
// confirmation, as a revocation does.
func (h *Handler) replaceProvisioningKey(w http.ResponseWriter, r *http.Request, s *session) {
	token, ok := formToken(r)
	if !ok {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, msgStaleForm, "")
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		http.Redirect(w, r, Prefix+"/keys?replace=provisioning", http.StatusSeeOther)
		return
	}
	var created account.CreatedKey
	err := pgx.BeginFunc(r.Context(), h.pool, func(tx pgx.Tx) error {
		old, k, err := account.NewStore(tx).ReplaceProvisioningKeyOnce(r.Context(), s.AccountID, token)
		if err != nil {
			return err
		}
		created = k
		if old != nil {
			if err := audit.Record(r.Context(), tx, h.sessionEvent(r, s, audit.KeyRevoked, keyDetail(*old))); err != nil {
				return err
			}
		}
		return audit.Record(r.Context(), tx, h.sessionEvent(r, s, audit.KeyCreated, keyDetail(k.Key)))
	})
	var dup *account.KeyCreatedError
	switch {
	case errors.As(err, &dup):
		h.keysAnswer(w, r, s, http.StatusConflict, nil, alreadyCreated(dup.Key), "")
	case err != nil:
		h.failure(w, r, s, err)
	default:
		h.keysAnswer(w, r, s, http.StatusCreated, &created, "", "")
	}
}

// keyDetail is an audit event's detail for key k: its kind, display form and label, never the
// key itself (as the management API writes it).
func keyDetail(k account.Key) string {
	return string(k.Kind) + " key " + k.Prefix + " (" + k.Label + ")"
}
