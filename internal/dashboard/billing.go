package dashboard

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/plan"
)

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
	case errors.Is(err, billing.ErrAlreadySubscribed):
		status, msg = http.StatusConflict, "You already have a subscription at Stripe: its confirmation has not reached "+
			"Mailvet yet, and your plan changes as soon as it does. Do not pay again; see it in the billing portal."
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
	back := h.cfg.PublicURL + Prefix + "/billing"
	u, err := h.portal.PortalURL(r.Context(), *a.StripeCustomerID, back)
	if err != nil {
		h.billingError(w, r, s, err)
		return
	}
	// Whoever holds the portal's address can change the card and the subscription out of our
	// sight: it never leaves without its event (docs/security.md, "Audit log").
	if err := audit.Record(r.Context(), h.pool, h.sessionEvent(r, s, audit.BillingPortalOpened, "returns to "+back)); err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.toStripe(w, r, s, u)
}

// toStripe sends the browser to a page of Stripe's, Checkout or the billing portal: with a
// redirect when the dashboard's form-action allows its origin (stripeOrigins), else with a page
// that links to it. A browser refuses a form's redirect to an origin form-action does not name,
// but not a link the user follows, so a Stripe account on a custom domain still reaches its page
// (docs/dashboard.md, "Headers").
func (h *Handler) toStripe(w http.ResponseWriter, r *http.Request, s *session, u string) {
	if pu, err := url.Parse(u); err == nil && slices.Contains(stripeOrigins, pu.Scheme+"://"+pu.Host) {
		http.Redirect(w, r, u, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "stripe", &view{Title: "Continue to Stripe", Nav: "billing", Session: s, Data: u})
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
	// A customer the account already had may have paid a subscription whose webhook has not
	// arrived; one created here has none.
	known := req.CustomerID != ""
	if !known {
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
		// Asked only when a new session is to be opened: the account still looks free, so a
		// paying subscription at Stripe is one whose webhook is late, and a second session would
		// charge the customer twice (docs/dashboard.md, "How an upgrade works").
		if known {
			paying, err := h.checkout.Subscribed(ctx, req.CustomerID)
			if err == nil && paying {
				err = billing.ErrAlreadySubscribed
			}
			if err != nil {
				stripeErr = err
				return "", "", err
			}
		}
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
	h.toStripe(w, r, s, co.URL)
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
	detail := "spend cap removed"
	if eur != nil {
		detail = "spend cap set to €" + formatEUR(*eur)
	}
	if err := h.audited(r.Context(), func(tx pgx.Tx) error {
		return account.NewStore(tx).SetSpendCap(r.Context(), s.AccountID, eur)
	}, func() audit.Event { return h.sessionEvent(r, s, audit.SpendCapChanged, detail) }); err != nil {
		h.failure(w, r, s, err)
		return
	}
	done := "cap-set"
	if eur == nil {
		done = "cap-clear"
	}
	http.Redirect(w, r, Prefix+"/billing?done="+done, http.StatusSeeOther)
}
