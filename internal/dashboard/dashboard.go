// Package dashboard is the customer dashboard served by the API binary under /dashboard/
// (docs/dashboard.md): sign-up and sign-in, the overview with usage, keys, the delivery log,
// billing and the verify playground. Pages are server-rendered html/template with embedded
// assets; every flow works with plain forms. Rules are never implemented twice: keys, usage,
// deliveries and billing go through the same packages as the management API, the playground and
// the lists through the verification service the verify API adapts (internal/verification), and
// refusals are worded from the one error mapping (internal/problem).
package dashboard

import (
	"context"
	"embed"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/httpbody"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/mailer"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/verification"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the dashboard is mounted.
const Prefix = "/dashboard"

// UploadPath is the list upload form's route. Its body is a file of up to the list limits, not
// a small form: the API server that mounts the dashboard lets it past its JSON body guard
// (docs/dashboard.md, "What a customer can do").
const UploadPath = Prefix + "/lists"

// Portal opens Stripe billing portal sessions (billing.Stripe).
type Portal interface {
	PortalURL(ctx context.Context, customerID, returnURL string) (string, error)
}

// Checkout opens Stripe Checkout for an upgrade (billing.Stripe).
type Checkout interface {
	PrepareCustomer(ctx context.Context, r billing.CheckoutRequest) (string, error)
	CheckoutURL(ctx context.Context, r billing.CheckoutRequest) (string, error)
	Sells(tier plan.Tier) bool
	Subscribed(ctx context.Context, customerID string) (bool, error)
}

// Verification is the verification service (internal/verification, *verification.Service) as
// the playground and the list pages call it: the one the API's verify and list routes adapt, so
// that what the dashboard asks for is admitted, held, limited and billed exactly as the API's
// (docs/architecture.md, "Verification service").
type Verification interface {
	One(ctx context.Context, req verification.Request, email string) (*verification.Answer, verification.Window, error)
	UploadList(ctx context.Context, u verification.ListUpload, file io.Reader) (list.List, error)
	Lists(ctx context.Context, account string, after *uuid.UUID, limit int) ([]list.List, bool, error)
	List(ctx context.Context, account string, id uuid.UUID) (list.List, error)
	CancelList(ctx context.Context, account string, id uuid.UUID) (list.List, error)
	DeleteList(ctx context.Context, account string, id uuid.UUID) error
	ExportList(ctx context.Context, l list.List, format list.Format, statuses []string, formulas list.Formulas, w io.Writer, flush func()) error
}

// Refusal is a request the dashboard made for a customer that the verification service refused,
// for the API server's metering: the usage log's rejection row of a verify request and the
// admission refusal counter (docs/api.md, "Metering"; docs/operations.md), as for the API's own.
type Refusal struct {
	AccountID, KeyID string
	// Route is the usage log's name of a verify request ("verify"), "" for a list's.
	Route string
	// Code is the refusal's error code (docs/errors.md).
	Code string
	// ItemKey names the refusal's usage row, unique per request.
	ItemKey string
	// Sandbox is true for a sandbox key's request, which leaves no usage row (docs/sandbox.md).
	Sandbox bool
}

// Config is what the dashboard takes from the process configuration (docs/operations.md,
// "Configuration"); the API server builds it.
type Config struct {
	// PublicURL is the server's address as customers reach it (MAILVET_PUBLIC_URL): the links the
	// dashboard gives out, and Secure cookies when it is https.
	PublicURL string
	// TrustedProxies name the reverse proxies whose X-Forwarded-For is believed
	// (MAILVET_TRUSTED_PROXIES), for the sign-in throttle.
	TrustedProxies []netip.Prefix
	// Plans are the tiers' limits and prices shown and enforced on the pages.
	Plans plan.Catalog
	// Lists bound a list upload (MAILVET_LIST_MAX_ROWS, MAILVET_LIST_MAX_BYTES).
	Lists ListLimits
	// SessionTTL is how long a sign-in lasts (MAILVET_DASHBOARD_SESSION_TTL, docs/dashboard.md).
	SessionTTL time.Duration
	// SessionIdle is how long a session lasts without a request (MAILVET_DASHBOARD_SESSION_IDLE);
	// zero means 1 hour.
	SessionIdle time.Duration
	// Signup is MAILVET_DASHBOARD_SIGNUP: config.SignupConfirm (also when empty),
	// config.SignupUnconfirmed or config.SignupOff (docs/dashboard.md, "Email confirmation").
	Signup string
	// ConfirmTTL and ResetTTL are how long a mailed link works (MAILVET_EMAIL_CONFIRM_TTL,
	// MAILVET_PASSWORD_RESET_TTL); zero means 24 hours and 1 hour.
	ConfirmTTL, ResetTTL time.Duration
}

// Mailer sends the dashboard's mail (mailer.Relay: the operator's relay, or dev mode's sink).
type Mailer interface {
	Send(ctx context.Context, m mailer.Message) error
}

// ListLimits bound one list upload (docs/lists.md, "Limits").
type ListLimits struct {
	MaxRows  int
	MaxBytes int64
}

// Deps are what the dashboard needs; the API server provides them.
type Deps struct {
	Config   Config
	Log      *slog.Logger
	Pool     *pgxpool.Pool
	JS       jetstream.JetStream // replays of failed deliveries are published here
	Layout   queue.Layout        // the deployment's NATS names
	Portal   Portal
	Checkout Checkout
	// Mailer sends the confirmation and password-reset links; nil: no relay is configured, so
	// there is no password reset by email, and sign-ups cannot be confirmed.
	Mailer Mailer
	// Verify runs the playground's verifications and the list pages (verification.Service).
	Verify Verification
	// Refused, if set, is told of every refusal of Verify (Refusal).
	Refused func(Refusal)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler serves the dashboard.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	js       jetstream.JetStream
	layout   queue.Layout
	portal   Portal
	checkout Checkout
	verify   Verification
	// onRefusal is Deps.Refused.
	onRefusal func(Refusal)
	mailer    Mailer
	mailing   sync.WaitGroup // mail on its way (sendInBackground)
	now       func() time.Time
	accounts  *account.Store
	pages     map[string]*template.Template
	mux       *http.ServeMux
	// secureCookies: the public URL is https, so cookies are Secure even when TLS ends at a proxy.
	secureCookies bool
	hasher        hasher
	hashSlots     chan struct{} // see withHashSlot
	// origins refuses a form posted from another origin (sameOrigin).
	origins *http.CrossOriginProtection
}

// New builds the dashboard handler.
func New(d Deps) *Handler {
	h := &Handler{cfg: d.Config, log: d.Log, pool: d.Pool, js: d.JS, layout: d.Layout, portal: d.Portal, checkout: d.Checkout,
		verify: d.Verify, onRefusal: d.Refused, mailer: d.Mailer, now: d.Now, accounts: account.NewStore(d.Pool), hasher: defaultHasher,
		hashSlots:     make(chan struct{}, max(2, runtime.GOMAXPROCS(0))),
		secureCookies: strings.HasPrefix(d.Config.PublicURL, "https://")}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.pages = parsePages()
	h.origins = http.NewCrossOriginProtection()
	if u, err := url.Parse(d.Config.PublicURL); err == nil && u.Scheme != "" && u.Host != "" {
		// Behind a proxy that rewrites Host, a browser's Origin is the public URL's.
		_ = h.origins.AddTrustedOrigin(u.Scheme + "://" + u.Host)
	}
	h.routes()
	return h
}

func (h *Handler) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", staticFiles(http.FileServerFS(static))))
	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
	})
	m.HandleFunc("GET "+Prefix+"/signup", h.anonymous(h.signupPage))
	m.HandleFunc("POST "+Prefix+"/signup", h.anonymous(h.signup))
	m.HandleFunc("GET "+Prefix+"/signin", h.anonymous(h.signinPage))
	m.HandleFunc("POST "+Prefix+"/signin", h.anonymous(h.signin))
	m.HandleFunc("GET "+Prefix+"/forgot", h.anonymous(h.forgotPage))
	m.HandleFunc("POST "+Prefix+"/forgot", h.anonymous(h.forgot))
	// The mailed links work whether or not the browser is signed in (docs/dashboard.md).
	m.HandleFunc("GET "+Prefix+"/confirm", h.public(h.confirmPage))
	m.HandleFunc("POST "+Prefix+"/confirm", h.public(h.confirm))
	m.HandleFunc("GET "+Prefix+"/reset", h.public(h.resetPage))
	m.HandleFunc("POST "+Prefix+"/reset", h.public(h.reset))

	m.HandleFunc("POST "+Prefix+"/signout", h.signedIn(h.signout))
	m.HandleFunc("GET "+Prefix+"/{$}", h.signedIn(h.overview))
	m.HandleFunc("POST "+Prefix+"/confirm/resend", h.signedIn(h.resendConfirmation))
	// Everything else needs a confirmed email (docs/dashboard.md, "Email confirmation").
	confirmed := func(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
		return h.signedIn(h.confirmed(next))
	}
	m.HandleFunc("GET "+Prefix+"/keys", confirmed(h.keysPage))
	m.HandleFunc("POST "+Prefix+"/keys", confirmed(h.createKey))
	m.HandleFunc("POST "+Prefix+"/keys/{id}/revoke", confirmed(h.revokeKey))
	m.HandleFunc("POST "+Prefix+"/keys/provisioning", confirmed(h.createProvisioningKey))
	m.HandleFunc("POST "+Prefix+"/keys/provisioning/revoke", confirmed(h.revokeProvisioningKey))
	m.HandleFunc("POST "+Prefix+"/keys/provisioning/replace", confirmed(h.replaceProvisioningKey))
	m.HandleFunc("GET "+Prefix+"/deliveries", confirmed(h.deliveriesPage))
	m.HandleFunc("POST "+Prefix+"/deliveries/{id}/retry", confirmed(h.retryDelivery))
	m.HandleFunc("GET "+Prefix+"/billing", confirmed(h.billingPage))
	m.HandleFunc("POST "+Prefix+"/billing/portal", confirmed(h.openPortal))
	m.HandleFunc("POST "+Prefix+"/billing/checkout", confirmed(h.startCheckout))
	m.HandleFunc("POST "+Prefix+"/billing/spend-cap", confirmed(h.setSpendCap))
	m.HandleFunc("GET "+Prefix+"/playground", confirmed(h.playgroundPage))
	m.HandleFunc("POST "+Prefix+"/playground", confirmed(h.playground))
	m.HandleFunc("GET "+Prefix+"/lists", confirmed(h.listsPage))
	m.HandleFunc("POST "+UploadPath, h.signedInUpload(h.confirmed(h.uploadList)))
	m.HandleFunc("GET "+Prefix+"/lists/{id}", confirmed(h.listPage))
	m.HandleFunc("GET "+Prefix+"/lists/{id}/download", confirmed(h.downloadList))
	m.HandleFunc("POST "+Prefix+"/lists/{id}/cancel", confirmed(h.listAction(false, "list-canceled")))
	m.HandleFunc("POST "+Prefix+"/lists/{id}/delete", confirmed(h.listAction(true, "list-deleted")))
	m.HandleFunc("GET "+Prefix+"/security", confirmed(h.securityPage))
	m.HandleFunc("GET "+Prefix+"/settings", h.signedIn(h.settingsPage))
	m.HandleFunc("POST "+Prefix+"/settings/password", h.signedIn(h.changePassword))
	m.HandleFunc("GET "+Prefix+"/settings/data", h.signedIn(h.dataPage))
	m.HandleFunc("GET "+Prefix+"/settings/data/export", h.signedIn(h.exportData))
	m.HandleFunc("POST "+Prefix+"/settings/data/delete", h.signedIn(h.deleteAccount))
	m.HandleFunc(Prefix+"/", h.notFound)
	h.mux = m
}

// stripeOrigins are the origins of Stripe's hosted pages, Checkout and the billing portal, to
// which the billing page's buttons are answered with a redirect. A browser holds a form's
// redirects to the page's form-action too, so the policy allows them there; a Stripe URL on
// another origin (a custom domain of the Stripe account) is given as a link instead (toStripe).
var stripeOrigins = []string{"https://checkout.stripe.com", "https://billing.stripe.com"}

// csp is the dashboard's Content-Security-Policy (docs/dashboard.md, "Headers"): only the
// dashboard's own scripts, styles and images, no plugins, no <base>, no framing, and forms that
// post only to the dashboard, so that markup slipped into a page could not send a form elsewhere.
var csp = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self' " +
	strings.Join(stripeOrigins, " ")

// SetHeaders sets the headers every dashboard answer carries (docs/dashboard.md, "Headers").
// Pages show account data and one-time keys: never cache them, never frame them, and run only
// the dashboard's own scripts and styles. The API server sets them on every request under Prefix
// before anything else can answer, so that the answers it makes itself there (a method it does
// not route) carry them as well.
func SetHeaders(hd http.Header) {
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
}

// ServeHTTP sets the headers every dashboard response carries and dispatches the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	SetHeaders(w.Header())
	if err := h.origins.Check(r); err != nil {
		h.crossOrigin(w, r)
		return
	}
	// Every input is bounded: forms are small, so anything larger is refused unread. A list
	// upload streams its file to the verification service, which holds it to the list limits;
	// its form's own fields and boundaries get uploadSlack on top, and the body an idle deadline.
	if r.Method == http.MethodPost && r.URL.Path == UploadPath {
		r.Body = http.MaxBytesReader(w, r.Body, h.cfg.Lists.MaxBytes+uploadSlack)
		r.Body = struct {
			io.Reader
			io.Closer
		}{httpbody.Idle(w, r.Body), r.Body}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	}
	h.mux.ServeHTTP(w, r)
}

// staticFiles lets browsers cache the embedded assets for an hour; they change only with a
// release, and the pages that name them are never cached.
func staticFiles(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// crossOrigin answers a POST a browser says came from another origin (Sec-Fetch-Site, or an
// Origin that is neither the request's host nor the public URL's): refused before any token is
// looked at (docs/dashboard.md, "Security model", "CSRF"). The double-submit token of the sign-in
// and sign-up forms is only as strong as its cookie, and a page of another host of the same site
// (a sibling subdomain, which SameSite=Lax does not keep out) can set that cookie to a value it
// knows, then post the sign-in form with it and sign the browser into an account of its own.
func (h *Handler) crossOrigin(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusForbidden, "message", &view{Title: "Form refused",
		Error: "This form was sent from another site, so the dashboard did not act on it. Open the dashboard itself and try again."})
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusNotFound, "message", &view{Title: "Not found",
		Error: "There is no such page in the dashboard."})
}
