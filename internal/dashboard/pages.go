package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/webhook"
)

// overviewData is the overview page: plan, this month's usage and the 30-day chart.
type overviewData struct {
	Account account.Account
	Status  string
	Limits  plan.Limits
	Free    bool
	Summary usage.Summary
	Percent float64 // of the included volume used, capped at 100 for the bar
	Chart   chart
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	limits := h.cfg.Plans.Of(a.Tier)
	free := a.Tier == plan.Free
	now := h.now()
	sum, err := usage.Summarize(ctx, h.pool, a.ID, string(a.Tier), free, limits.MonthlyCalls, limits.OverageEUR, now)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	days, err := usage.Daily(ctx, h.pool, a.ID, now)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := overviewData{Account: a, Status: subscriptionStatus(a), Limits: limits, Free: free, Summary: sum, Chart: newChart(days)}
	if sum.CallsIncluded > 0 {
		d.Percent = math.Min(100, math.Round(float64(sum.CallsUsed)/float64(sum.CallsIncluded)*1000)/10)
	}
	h.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Session: s, Data: d})
}

func subscriptionStatus(a account.Account) string {
	if a.SubscriptionStatus == nil {
		return "none"
	}
	return *a.SubscriptionStatus
}

// keysData is the keys page. New is the key just created, shown this once.
type keysData struct {
	Keys         []account.Key
	Max          int
	Provisioning *account.Key
	New          *account.CreatedKey
	Label        string
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
	return keysData{Keys: keys, Max: h.cfg.Plans.MaxKeys(a.Tier), Provisioning: prov}, nil
}

func (h *Handler) keysPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := h.keysData(r, s)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.render(w, r, http.StatusOK, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d, Notice: notice(r)})
}

// keysAnswer renders the keys page after a POST: with the new key shown once, or with an error.
func (h *Handler) keysAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, created *account.CreatedKey, msg, label string) {
	d, err := h.keysData(r, s)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d.New, d.Label = created, label
	h.render(w, r, status, "keys", &view{Title: "API keys", Nav: "keys", Session: s, Data: d, Error: msg})
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, s *session) {
	label := strings.TrimSpace(r.PostForm.Get("label"))
	if err := account.CheckLabel(label); err != nil {
		h.keysAnswer(w, r, s, http.StatusUnprocessableEntity, nil, "The label "+strings.TrimPrefix(err.Error(), "label ")+".", label)
		return
	}
	k, err := h.accounts.CreateStandardKey(r.Context(), s.AccountID, label, h.cfg.Plans.MaxKeys)
	var limit *account.KeyLimitError
	if errors.As(err, &limit) {
		h.keysAnswer(w, r, s, http.StatusConflict, nil, "Your plan allows "+strconv.Itoa(limit.Max)+
			" active standard keys. Revoke one before creating another, or upgrade your plan.", label)
		return
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.keysAnswer(w, r, s, http.StatusCreated, &k, "", "")
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request, s *session) {
	// The id is parsed to its canonical form first, as the management API does (internal/api/keys.go).
	id, err := uuid.Parse(r.PathValue("id"))
	if err == nil {
		err = h.accounts.RevokeStandardKey(r.Context(), s.AccountID, id.String())
	} else {
		err = account.ErrKeyNotFound
	}
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

func (h *Handler) createProvisioningKey(w http.ResponseWriter, r *http.Request, s *session) {
	k, err := h.accounts.CreateProvisioningKey(r.Context(), s.AccountID)
	if errors.Is(err, account.ErrProvisioningKeyExists) {
		h.keysAnswer(w, r, s, http.StatusConflict, nil, "Your account already has an active provisioning key. Revoke it first to create a new one.", "")
		return
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.keysAnswer(w, r, s, http.StatusCreated, &k, "", "")
}

func (h *Handler) revokeProvisioningKey(w http.ResponseWriter, r *http.Request, s *session) {
	n, err := h.accounts.RevokeProvisioningKey(r.Context(), s.AccountID)
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

// deliveriesData is the delivery log page.
type deliveriesData struct {
	Page       webhook.Page
	State      string
	States     []string
	CanRetry   bool
	RetryWhy   string
	Retention  string
	NextCursor string
}

var deliveryStates = []string{"", webhook.StatePending, webhook.StateRetrying, webhook.StateDelivered, webhook.StateFailed}

func (h *Handler) deliveriesPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.deliveriesAnswer(w, r, s, http.StatusOK, "")
}

func (h *Handler) deliveriesAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	q := r.URL.Query()
	f := webhook.ListFilter{Status: q.Get("state"), Cursor: q.Get("cursor")}
	if len(f.Cursor) > 64 {
		f.Cursor = "bad"
	}
	acct, err := uuid.Parse(a.ID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	page, err := webhook.ListDeliveries(ctx, h.pool, acct, f)
	if errors.Is(err, webhook.ErrInvalidFilter) {
		f = webhook.ListFilter{}
		page, err = webhook.ListDeliveries(ctx, h.pool, acct, f)
		msg, status = "That filter or page does not exist; showing the newest deliveries.", http.StatusBadRequest
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := deliveriesData{Page: page, State: f.Status, States: deliveryStates, Retention: "30 days"}
	if a.Tier == plan.Free {
		d.Retention = "24 hours"
	}
	if err := webhook.ReplayAllowed(a.Tier); err != nil {
		d.RetryWhy = "Retrying failed deliveries is available on the builder and scale plans; upgrade on the Billing page."
	} else {
		d.CanRetry = true
	}
	if page.NextCursor != "" {
		d.NextCursor = "?" + url.Values{"state": {f.Status}, "cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "deliveries", &view{Title: "Deliveries", Nav: "deliveries", Session: s, Data: d,
		Error: msg, Notice: notice(r)})
}

func (h *Handler) retryDelivery(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if err := webhook.ReplayAllowed(a.Tier); err != nil {
		h.deliveriesAnswer(w, r, s, http.StatusForbidden, "Retrying failed deliveries is available on the builder and scale plans; upgrade on the Billing page.")
		return
	}
	acct, _ := uuid.Parse(a.ID)
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		err = webhook.ErrDeliveryNotFound
	} else {
		var replay uuid.UUID
		replay, err = webhook.Replay(ctx, h.pool, h.js, h.layout, acct, id)
		if err != nil && replay != uuid.Nil {
			// Committed but not published: the outbox sweep sends it (webhook.Replay).
			h.log.Warn("dashboard: publish replay", "delivery", replay, "err", err)
			err = nil
		}
	}
	switch {
	case errors.Is(err, webhook.ErrDeliveryNotFound):
		h.deliveriesAnswer(w, r, s, http.StatusNotFound, "There is no such delivery in your account.")
	case errors.Is(err, webhook.ErrNotReplayable):
		h.deliveriesAnswer(w, r, s, http.StatusConflict, "Only a failed delivery can be retried.")
	case err != nil:
		h.failure(w, r, s, err)
	default:
		http.Redirect(w, r, Prefix+"/deliveries?done=retried", http.StatusSeeOther)
	}
}

// billingData is the billing page.
type billingData struct {
	Account  account.Account
	Status   string
	Limits   plan.Limits
	Upgrades []upgrade
	Cap      string // the spend cap as the form shows it
}

type upgrade struct {
	Tier   plan.Tier
	Limits plan.Limits
}

func (h *Handler) billingPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.billingAnswer(w, r, s, http.StatusOK, "")
}

func (h *Handler) billingAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	a, err := h.accounts.Get(r.Context(), s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := billingData{Account: a, Status: subscriptionStatus(a), Limits: h.cfg.Plans.Of(a.Tier)}
	if a.Tier == plan.Free && h.checkout != nil {
		for _, t := range []plan.Tier{plan.Builder, plan.Scale} {
			if h.checkout.Sells(t) {
				d.Upgrades = append(d.Upgrades, upgrade{Tier: t, Limits: h.cfg.Plans.Of(t)})
			}
		}
	}
	if a.HardCapEUR != nil {
		d.Cap = strconv.FormatFloat(*a.HardCapEUR, 'f', 2, 64)
	}
	h.render(w, r, status, "billing", &view{Title: "Billing", Nav: "billing", Session: s, Data: d, Error: msg, Notice: notice(r)})
}

// billingError turns a Stripe failure into what the page says; the log keeps the cause. Stripe
// that cannot be reached (billing.Stripe gives up after billing.CallTimeout) is an outage the
// customer can wait out: 503 with Retry-After. Stripe refusing the request is a 502; a deployment
// without Stripe keys is a 500.
func (h *Handler) billingError(w http.ResponseWriter, r *http.Request, s *session, err error) {
	h.log.Warn("dashboard: billing", "err", err)
	status, msg := http.StatusBadGateway, "The billing provider could not complete the request. Try again later; if it persists, contact support."
	switch {
	case errors.Is(err, billing.ErrProviderUnreachable):
		w.Header().Set("Retry-After", retryAfterSeconds)
		status, msg = http.StatusServiceUnavailable, "Billing is temporarily unreachable: the billing provider (Stripe) did not answer. Try again in a few seconds."
	case errors.Is(err, billing.ErrNotConfigured):
		// The deployment's fault, not Stripe's: a 500, as the API answers (docs/api.md).
		status, msg = http.StatusInternalServerError, "Billing is not set up on this Mailvet deployment; ask its operator."
	case errors.Is(err, billing.ErrNoPrice):
		msg = "That plan cannot be bought online on this deployment; ask its operator."
	}
	h.billingAnswer(w, r, s, status, msg)
}

func (h *Handler) openPortal(w http.ResponseWriter, r *http.Request, s *session) {
	a, err := h.accounts.Get(r.Context(), s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if a.StripeCustomerID == nil {
		h.billingAnswer(w, r, s, http.StatusConflict, "There is no billing account yet: it is created when you upgrade to a paid plan.")
		return
	}
	u, err := h.portal.PortalURL(r.Context(), *a.StripeCustomerID, h.cfg.PublicURL+Prefix+"/billing")
	if err != nil {
		h.billingError(w, r, s, err)
		return
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// startCheckout upgrades a free account through Stripe Checkout. The customer is recorded on the
// account before the browser leaves, so the subscription events Stripe sends afterwards find the
// account and move its tier (billing.Events).
func (h *Handler) startCheckout(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	tier, err := plan.ParseTier(r.PostForm.Get("tier"))
	if err != nil || tier == plan.Free {
		h.billingAnswer(w, r, s, http.StatusUnprocessableEntity, "Choose the builder or scale plan.")
		return
	}
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if a.Tier != plan.Free {
		h.billingAnswer(w, r, s, http.StatusConflict, "You already have a paid plan; change it in the billing portal.")
		return
	}
	req := billing.CheckoutRequest{AccountID: a.ID, Email: s.Email, Tier: tier,
		SuccessURL: h.cfg.PublicURL + Prefix + "/billing?done=checkout", CancelURL: h.cfg.PublicURL + Prefix + "/billing"}
	if a.StripeCustomerID != nil {
		req.CustomerID = *a.StripeCustomerID
	}
	if h.checkout == nil || !h.checkout.Sells(tier) {
		h.billingError(w, r, s, billing.ErrNoPrice)
		return
	}
	if req.CustomerID == "" {
		if req.CustomerID, err = h.checkout.PrepareCustomer(ctx, req); err != nil {
			h.billingError(w, r, s, err)
			return
		}
		if err := h.accounts.LinkCustomer(ctx, a.ID, req.CustomerID); err != nil {
			h.failure(w, r, s, err)
			return
		}
	}
	var stripeErr error
	co, reused, err := h.accounts.Checkout(ctx, a.ID, h.now(), func(expires time.Time) (string, plan.Tier, error) {
		req.ExpiresAt = expires
		u, err := h.checkout.CheckoutURL(ctx, req)
		stripeErr = err
		return u, tier, err
	})
	switch {
	case stripeErr != nil:
		h.billingError(w, r, s, stripeErr)
		return
	case errors.Is(err, account.ErrCheckoutPending):
		// Another upgrade (a second tab) is still opening its session: that one is the one to pay.
		w.Header().Set("Retry-After", retryAfterSeconds)
		h.billingAnswer(w, r, s, http.StatusServiceUnavailable,
			"Another upgrade of your account is still being prepared. Try again in a few seconds: it will take you to the same payment page.")
		return
	case err != nil:
		h.failure(w, r, s, err)
		return
	}
	if reused && co.Tier != tier {
		h.billingAnswer(w, r, s, http.StatusConflict, fmt.Sprintf(
			"An upgrade to the %s plan is still open at Stripe until %s UTC: finish it there (its Upgrade button takes you back), or choose another plan after that time.",
			co.Tier, co.ExpiresAt.UTC().Format("15:04")))
		return
	}
	// A session already open for this tier is the one to pay: it completes once, so a second
	// upgrade (a double click, another tab) cannot start a second subscription.
	http.Redirect(w, r, co.URL, http.StatusSeeOther)
}

// maxCapEUR is account.SetSpendCap's upper bound, repeated here only for the form's message.
const maxCapEUR = 1e9

func (h *Handler) setSpendCap(w http.ResponseWriter, r *http.Request, s *session) {
	raw := strings.TrimSpace(strings.Replace(r.PostForm.Get("cap_eur"), ",", ".", 1))
	var eur *float64
	if r.PostForm.Get("action") != "clear" && raw != "" {
		v, err := strconv.ParseFloat(raw, 64)
		if err != nil || len(raw) > 20 || !(v >= 0 && v <= maxCapEUR) {
			h.billingAnswer(w, r, s, http.StatusUnprocessableEntity, "Enter the cap in euros, like 50 or 49.90 (from 0 to 1,000,000,000), or leave it empty for no cap.")
			return
		}
		v = math.Round(v*100) / 100
		eur = &v
	}
	if err := h.accounts.SetSpendCap(r.Context(), s.AccountID, eur); err != nil {
		h.failure(w, r, s, err)
		return
	}
	done := "cap-set"
	if eur == nil {
		done = "cap-clear"
	}
	http.Redirect(w, r, Prefix+"/billing?done="+done, http.StatusSeeOther)
}

// playgroundData is the playground page: the form, and the last answer.
type playgroundData struct {
	Keys   []account.Key
	KeyID  string
	Email  string
	Fields []resultField
	Raw    string
}

// resultField is one field of a verify result with what it means (docs/api.md, "Result").
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

// playground verifies one address with a key of the account. The key is looked up among the
// account's own active standard keys, so another account's key id is just "no such key".
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
	body, _ := json.Marshal(map[string]string{"email": d.Email})
	ans := h.call(ctx, p, http.MethodPost, "/v1/email/verify", "application/json", bytes.NewReader(body))
	if ans.status != http.StatusOK {
		status := ans.status
		if status < 400 {
			status = http.StatusBadGateway
		}
		passRetryAfter(w, ans)
		respond(status, ans.problemText())
		return
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(ans.body, &res); err != nil {
		h.failure(w, r, s, err)
		return
	}
	for _, f := range fieldMeanings {
		if v, ok := res[f.name]; ok {
			d.Fields = append(d.Fields, resultField{Name: f.name, Value: strings.Trim(string(v), `"`), Meaning: f.meaning})
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, ans.body, "", "  ") == nil {
		d.Raw = pretty.String()
	}
	h.render(w, r, http.StatusOK, "playground", &view{Title: "Playground", Nav: "playground", Session: s, Data: d})
}
