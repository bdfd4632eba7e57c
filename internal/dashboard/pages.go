package dashboard

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
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
	Period  string // the month, with its last day included (periodText)
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
	d := overviewData{Account: a, Status: subscriptionStatus(a), Limits: limits, Free: free, Summary: sum, Chart: newChart(days),
		Period: periodText(sum.Period.Start, sum.Period.End)}
	if sum.CallsIncluded > 0 {
		d.Percent = math.Min(100, math.Round(float64(sum.CallsUsed)/float64(sum.CallsIncluded)*1000)/10)
	}
	h.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Session: s, Data: d})
}

// periodText shows a usage period by the days it includes: its end is exclusive, the first
// instant of the next month (docs/api.md, "GET /v1/management/usage/summary"), so "1 Nov – 1 Dec"
// would claim a day that is not in it. November 2026 reads "1 Nov – 30 Nov 2026".
func periodText(start, end time.Time) string {
	start, last := start.UTC(), end.UTC().Add(-time.Nanosecond)
	if start.Year() == last.Year() {
		return start.Format("2 Jan") + " – " + last.Format("2 Jan 2006")
	}
	return start.Format("2 Jan 2006") + " – " + last.Format("2 Jan 2006")
}

func subscriptionStatus(a account.Account) string {
	if a.SubscriptionStatus == nil {
		return "none"
	}
	return *a.SubscriptionStatus
}

// keysData is the keys page. New is the key just created, shown this once. KeyToken and ProvToken
// are the one-time tokens of the two create forms (newFormToken). Confirm, when set, makes the page
// the confirmation of a revocation, and nothing else.
type keysData struct {
	Keys         []account.Key
	Max          int
	Provisioning *account.Key
	New          *account.CreatedKey
	Label        string
	KeyToken     string
	ProvToken    string
	Confirm      *revokeConfirm
}

// revokeConfirm is the question asked before a key is revoked: the form posts to Action.
type revokeConfirm struct {
	Key    account.Key
	Action string
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
	k, err := h.accounts.CreateStandardKeyOnce(r.Context(), s.AccountID, label, token, h.cfg.Plans.MaxKeys)
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
	err = h.accounts.RevokeStandardKey(r.Context(), s.AccountID, id.String())
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
	k, err := h.accounts.CreateProvisioningKeyOnce(r.Context(), s.AccountID, token)
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
		d.RetryWhy = h.retryWhy()
	} else {
		d.CanRetry = true
	}
	if page.NextCursor != "" {
		d.NextCursor = "?" + url.Values{"state": {f.Status}, "cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "deliveries", &view{Title: "Deliveries", Nav: "deliveries", Session: s, Data: d,
		Error: msg, Notice: notice(r)})
}

// retryWhy tells a free account why it has no Retry button, and points only to an upgrade this
// deployment sells: without Stripe prices the billing page has no Upgrade button.
func (h *Handler) retryWhy() string {
	if len(h.upgrades()) > 0 {
		return "Retrying failed deliveries is available on the builder and scale plans; upgrade on the Billing page."
	}
	return "Retrying failed deliveries is available on the builder and scale plans, which are not sold online on this deployment; ask its operator."
}

func (h *Handler) retryDelivery(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	a, err := h.accounts.Get(ctx, s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if err := webhook.ReplayAllowed(a.Tier); err != nil {
		h.deliveriesAnswer(w, r, s, http.StatusForbidden, h.retryWhy())
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
	Free     bool
	Upgrades []upgrade // the plans a free account can buy here; none when Stripe sells none
	Cap      string    // the saved spend cap, with thousands separators; empty: none
	CapInput string    // what the cap input shows: the saved cap, or what was typed if refused
}

type upgrade struct {
	Tier   plan.Tier
	Limits plan.Limits
}

func (h *Handler) billingPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.billingAnswer(w, r, s, http.StatusOK, "")
}

func (h *Handler) billingAnswer(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	h.billingAnswerTyped(w, r, s, status, msg, nil)
}

// billingAnswerTyped is billingAnswer with the cap input showing typed (a refused cap) rather
// than the saved cap, so that the user corrects what they wrote instead of retyping it.
func (h *Handler) billingAnswerTyped(w http.ResponseWriter, r *http.Request, s *session, status int, msg string, typed *string) {
	a, err := h.accounts.Get(r.Context(), s.AccountID)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	d := billingData{Account: a, Status: subscriptionStatus(a), Limits: h.cfg.Plans.Of(a.Tier), Free: a.Tier == plan.Free}
	if d.Free {
		d.Upgrades = h.upgrades()
	}
	if a.HardCapEUR != nil {
		d.Cap = formatEUR(*a.HardCapEUR)
	}
	d.CapInput = d.Cap
	if typed != nil {
		d.CapInput = *typed
	}
	h.render(w, r, status, "billing", &view{Title: "Billing", Nav: "billing", Session: s, Data: d, Error: msg, Notice: notice(r)})
}

// upgrades are the paid plans this deployment sells through Stripe Checkout (those with a
// MAILVET_STRIPE_PRICE_*); none when Stripe is not set up.
func (h *Handler) upgrades() []upgrade {
	var ups []upgrade
	if h.checkout == nil {
		return nil
	}
	for _, t := range []plan.Tier{plan.Builder, plan.Scale} {
		if h.checkout.Sells(t) {
			ups = append(ups, upgrade{Tier: t, Limits: h.cfg.Plans.Of(t)})
		}
	}
	return ups
}

// billingError turns a Stripe failure into what the page says; the log keeps the cause. Stripe
// that cannot be reached (billing.Stripe gives up after billing.CallTimeout) is an outage the
// customer can wait out: 503 with Retry-After. Stripe refusing the request is a 502; a deployment
// without Stripe keys is a 500; a plan the deployment has no price for is the request's fault,
// not Stripe's: a 422, as startCheckout answers a plan it does not sell.
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
		status, msg = http.StatusUnprocessableEntity, msgNotSold
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

const msgNotSold = "That plan is not sold online on this deployment; ask its operator."

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
		// A form the page never showed (the page offers only the plans sold): the request
		// cannot be served, whatever Stripe says, so it is a 422 and Stripe is not called.
		h.billingAnswer(w, r, s, http.StatusUnprocessableEntity, msgNotSold)
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

var (
	// capThousands is an amount with commas between thousands and an optional decimal dot with
	// at most 2 decimals: 5,000 or 1,000,000.50. The first group has no leading zero, so "0,125"
	// (a European 0.125) is not read as 125.
	capThousands = regexp.MustCompile(`^[1-9][0-9]{0,2}(,[0-9]{3})+(\.[0-9]{1,2})?$`)
	// capPlain is digits with an optional decimal dot or comma and at most 2 decimals: 5000, 12.5,
	// 12,50. A comma followed by 3 digits matched capThousands first, so a decimal comma is
	// only ever ",d" or ",dd".
	capPlain = regexp.MustCompile(`^[0-9]+([.,][0-9]{1,2})?$`)
)

const msgCapFormat = "Enter the cap in euros with at most 2 decimals, like 5,000 or 5000 or 1,000,000.50 or 49.90 (a comma " +
	"before 1 or 2 decimals is read as a decimal point: 12,50 is 12.50), or leave it empty for no cap."

// parseCap reads a spend cap as typed. The cap has at most 2 decimals, so a comma followed by 3
// digits can only separate thousands ("5,000" is five thousand, never 5.000): the dashboard
// itself writes the cap that way. Anything that could be read two ways ("1.000,50", "12.345",
// "5,00,0") or is not a plain amount ("1e3", "NaN", "-5") is refused, not guessed.
func parseCap(typed string) (float64, string) {
	v := strings.TrimSpace(typed)
	switch {
	case capThousands.MatchString(v):
		v = strings.ReplaceAll(v, ",", "")
	case capPlain.MatchString(v):
		v = strings.Replace(v, ",", ".", 1)
	default:
		return 0, msgCapFormat
	}
	eur, err := strconv.ParseFloat(v, 64)
	if err != nil || eur > maxCapEUR {
		return 0, "The cap can be at most €1,000,000,000.00; leave it empty for no cap."
	}
	return math.Round(eur*100) / 100, ""
}

// formatEUR writes an amount in euros with 2 decimals and commas between thousands, as the
// cap form reads it back: 1000000000 is "1,000,000,000.00".
func formatEUR(eur float64) string {
	s := strconv.FormatFloat(eur, 'f', 2, 64)
	whole, cents, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + "." + cents
}

func (h *Handler) setSpendCap(w http.ResponseWriter, r *http.Request, s *session) {
	typed := r.PostForm.Get("cap_eur")
	var eur *float64
	if r.PostForm.Get("action") != "clear" && strings.TrimSpace(typed) != "" {
		v, msg := parseCap(typed)
		if msg != "" {
			h.billingAnswerTyped(w, r, s, http.StatusUnprocessableEntity, msg, &typed)
			return
		}
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
			d.Fields = append(d.Fields, resultField{Name: f.name, Value: fieldValue(f.name, v), Meaning: f.meaning})
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, ans.body, "", "  ") == nil {
		d.Raw = pretty.String()
	}
	h.render(w, r, http.StatusOK, "playground", &view{Title: "Playground", Nav: "playground", Session: s, Data: d})
}
