// Package config reads every Mailvet setting from the environment into one Config struct.
//
// Each binary calls Load once at start-up. Defaults are those of docs/operations.md, "Configuration"; a bad value stops the
// process with an error that names the variable, so an operator never has to guess which one.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/miekg/dns"
	"github.com/nats-io/nkeys"
	"golang.org/x/net/idna"

	"github.com/mailvet/mailvet/internal/dnsname"
	"github.com/mailvet/mailvet/internal/netguard"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/redact"
	"github.com/mailvet/mailvet/internal/sealed"
)

// Role names the binary that loads the configuration; the metrics listener default depends on it
// so that the three binaries can run side by side on one host.
type Role string

// The roles of the three binaries.
const (
	RoleAPI      Role = "api"
	RoleVerifier Role = "verifier"
	RoleWebhook  Role = "webhook"
)

// Config is the whole configuration of a Mailvet process.
type Config struct {
	Dev bool // -dev: embedded NATS when NatsURL is empty, in-process workers, auto-migrate, loopback listeners

	// LogFormat is MAILVET_LOG_FORMAT: LogText, LogJSON, or empty for the default (text on a
	// terminal in dev mode, JSON otherwise; docs/operations.md, "Logs").
	LogFormat string

	DatabaseURL string
	NatsURL     string // one URL or several, comma-separated; empty means "start an embedded server" (dev mode only)
	// NATS is how to reach the cluster besides its URLs, and this deployment's names on it.
	NATS        NATSOptions
	HTTPAddr    string
	MetricsAddr string
	PublicURL   string

	DNSResolver string // host:port

	SMTPPort           int
	SMTPHelo           string
	SMTPMailFrom       string
	SMTPTimeout        time.Duration
	SMTPProxy          string // socks5://host:port, or empty
	SMTPBlockedDomains []string
	SMTPMaxPerHost     int
	SMTPAllowCIDRs     []netip.Prefix // private or reserved ranges the prober may dial nonetheless

	// TrustedProxies are the addresses of the reverse proxies in front of the API
	// (MAILVET_TRUSTED_PROXIES): from them, and only from them, X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix

	// DisposableExtraFile and DisposableAllowFile are the operator's disposable-domain files
	// (docs/operations.md, "Data lists"). Load checks that they can be read; their lines
	// are checked where the verification engine's configuration is built
	// (verifyworker.EngineConfig).
	DisposableExtraFile string
	DisposableAllowFile string

	StreamReplicas      int
	WebhookAllowPrivate bool

	// GreylistWindow bounds the re-probes of an async job whose probe was greylisted
	// (MAILVET_GREYLIST_WINDOW); 0 turns them off.
	GreylistWindow time.Duration

	// ResultRetention is how long a verification's result snapshot (its address and result) is
	// kept in the usage log (MAILVET_RESULT_RETENTION); JobRetention how long a finished
	// asynchronous job keeps its email, result and webhook secret (MAILVET_JOB_RETENTION).
	// The verifier workers' retention loop applies both (docs/personal-data.md, "Retention").
	ResultRetention, JobRetention time.Duration

	// AdmissionWindow is how long a verify request may wait to be admitted together with others
	// while a group is in flight (MAILVET_ADMISSION_WINDOW, docs/api.md "Metering"); 0 admits
	// each request with its own statement and commit.
	AdmissionWindow time.Duration

	// ShutdownDelay is how long the API goes on serving after a stop signal, its /readyz failing,
	// before it stops accepting connections (MAILVET_SHUTDOWN_DELAY, docs/operations.md,
	// "Start-up and shutdown"): the time a load balancer that probes /readyz takes to send no more.
	ShutdownDelay time.Duration

	// SandboxRatePerMin is the per-account rate limit of sandbox keys' verify requests, emails a
	// minute across all replicas, apart from the plan's (MAILVET_SANDBOX_RATE_PER_MIN,
	// docs/sandbox.md).
	SandboxRatePerMin int

	// Lists bound bulk-list uploads and say how long their results are kept (MAILVET_LIST_*).
	Lists ListLimits
	// Uploads bound the list uploads a replica receives at once (docs/lists.md, "Limits").
	Uploads UploadLimits

	// Plans are the tiers' limits and prices: plan.Defaults with MAILVET_PLAN_* and
	// MAILVET_OVERAGE_EUR_* applied. They are the one source of truth for every limit.
	Plans plan.Catalog

	StripeSecretKey     string
	StripeWebhookSecret string
	StripeAPIBase       string
	StripePrices        map[string]plan.Tier // Stripe price id ⇒ tier

	// Secrets seal the webhook secrets stored in Postgres (MAILVET_SECRETS_KEY, and during a
	// rotation MAILVET_SECRETS_KEY_OLD; docs/operations.md, "Secrets at rest"). Without
	// MAILVET_SECRETS_KEY they are sealed.Process(), a key that dies with the process, and
	// SecretsKeySet is false: the API outside dev mode and the webhook worker then refuse to start
	// (RequireSecretsKey), and `api -dev` uses the key it keeps under .data/.
	Secrets       *sealed.Keys
	SecretsKeySet bool

	// DashboardSessionTTL is how long a dashboard sign-in lasts (MAILVET_DASHBOARD_SESSION_TTL,
	// docs/dashboard.md).
	DashboardSessionTTL time.Duration
	// DashboardSessionIdle is how long a dashboard session lasts without a request
	// (MAILVET_DASHBOARD_SESSION_IDLE, docs/dashboard.md).
	DashboardSessionIdle time.Duration

	// AuditRetention is how long audit events are kept (MAILVET_AUDIT_RETENTION,
	// docs/operations.md; docs/security.md, "Audit log").
	AuditRetention time.Duration
	// Signup is how the dashboard's sign-up works (MAILVET_DASHBOARD_SIGNUP, docs/dashboard.md,
	// "Email confirmation"): SignupConfirm, SignupUnconfirmed or SignupOff.
	Signup string
	// Mail is the SMTP relay of the dashboard's mail (MAILVET_MAIL_*); Addr "" is none.
	Mail Mail
	// ConfirmTTL and ResetTTL are how long a mailed confirmation or password-reset link works
	// (MAILVET_EMAIL_CONFIRM_TTL, MAILVET_PASSWORD_RESET_TTL).
	ConfirmTTL, ResetTTL time.Duration
}

// Mail is the SMTP relay the dashboard sends its links through (docs/operations.md, "Mail").
type Mail struct {
	Addr     string // MAILVET_MAIL_SMTP_ADDR, host:port
	From     string // MAILVET_MAIL_FROM
	Username string // MAILVET_MAIL_USERNAME; empty: no AUTH
	Password string // MAILVET_MAIL_PASSWORD; never logged
	// AllowPlaintext (MAILVET_MAIL_ALLOW_PLAINTEXT) lets a relay off loopback without STARTTLS
	// have the links in clear.
	AllowPlaintext bool
}

// The values of MAILVET_DASHBOARD_SIGNUP.
const (
	// SignupConfirm: a new account must confirm its email before it gets keys or verifications.
	SignupConfirm = "confirm"
	// SignupUnconfirmed: the operator allows accounts whose email nobody confirmed (no relay).
	SignupUnconfirmed = "unconfirmed"
	// SignupOff: no sign-up in the dashboard; accounts come from `bin/api admin create-account`.
	SignupOff = "off"
)

// CheckSignupMail is the API's start-up rule for sign-up (docs/operations.md, "Mail"): outside dev
// mode, sign-ups that must be confirmed need a relay to mail the link through. Dev mode without a
// relay mails to a loopback sink instead. It is separate from Load so that the other commands
// (migrate, admin) and the binaries that send no mail start without a relay.
func (c Config) CheckSignupMail() error {
	if c.Dev || c.Signup != SignupConfirm || c.Mail.Addr != "" {
		return nil
	}
	return errors.New("MAILVET_MAIL_SMTP_ADDR: must be set: dashboard sign-ups are confirmed by a mailed link " +
		"(MAILVET_DASHBOARD_SIGNUP=confirm, the default); set a relay, or MAILVET_DASHBOARD_SIGNUP=off " +
		"(accounts only from bin/api admin) or =unconfirmed (allow accounts whose email nobody confirmed)")
}

// UploadLimits bound what list uploads on their way can hold of a replica (docs/lists.md,
// "Limits"; internal/verification, lists.go).
type UploadLimits struct {
	PerAddress int   // uploads at once from one client address (MAILVET_UPLOAD_SLOTS_PER_ADDRESS)
	Free       int   // uploads at once of free-tier accounts together (MAILVET_UPLOAD_SLOTS_FREE)
	MinRate    int64 // bytes a second an upload must average after its first 30 s (MAILVET_UPLOAD_MIN_RATE); 0: none
}

// ListLimits are the bulk-list settings (docs/lists.md, "Limits").
type ListLimits struct {
	MaxRows  int   // data rows of one upload (MAILVET_LIST_MAX_ROWS)
	MaxBytes int64 // bytes of one upload (MAILVET_LIST_MAX_BYTES)
	// Retention is how long a finished list's rows and results are kept, by tier
	// (MAILVET_LIST_RETENTION_FREE for the free tier, MAILVET_LIST_RETENTION_PAID for the others).
	Retention map[plan.Tier]time.Duration
}

// maxAdmissionWindow bounds MAILVET_ADMISSION_WINDOW: every waiting request's latency grows by
// up to the window, and a few milliseconds already fill a group.
const maxAdmissionWindow = 100 * time.Millisecond

// The log formats MAILVET_LOG_FORMAT names.
const (
	LogText = "text"
	LogJSON = "json"
)

// DefaultDatabaseURL is used when DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/mailvet?sslmode=disable"

// Load reads the configuration for role from getenv (os.Getenv in production, a map in tests).
// All problems are reported together so that one start-up attempt shows every bad variable.
func Load(role Role, dev bool, getenv func(string) string) (Config, error) {
	e := env{getenv: getenv}
	c := Config{Dev: dev}

	c.LogFormat = e.str("MAILVET_LOG_FORMAT", "")
	if c.LogFormat != "" && c.LogFormat != LogText && c.LogFormat != LogJSON {
		e.fail("MAILVET_LOG_FORMAT", fmt.Errorf("%q: use %q or %q (unset: text on a terminal in dev mode, JSON otherwise)", c.LogFormat, LogText, LogJSON))
	}

	c.DatabaseURL = e.str("DATABASE_URL", DefaultDatabaseURL)
	e.check("DATABASE_URL", validPostgresURL(c.DatabaseURL))

	natsDefault := "nats://127.0.0.1:4222"
	if dev {
		natsDefault = ""
	}
	c.NatsURL = e.str("NATS_URL", natsDefault)
	if c.NatsURL == "" && !dev {
		e.fail("NATS_URL", errors.New("must be set (an embedded server is only started with -dev)"))
	}

	if c.NatsURL != "" {
		empty := false
		for _, u := range strings.Split(c.NatsURL, ",") {
			if u = strings.TrimSpace(u); u == "" {
				empty = true
				continue
			}
			e.check("NATS_URL", validNATSURL(u))
		}
		if empty {
			e.fail("NATS_URL", errors.New("an empty entry: separate the URLs by single commas, with none at either end"))
		}
	}
	c.NATS.Prefix = e.str("MAILVET_NATS_PREFIX", "")
	if c.NATS.Prefix != "" && !natsPrefix.MatchString(c.NATS.Prefix) {
		e.fail("MAILVET_NATS_PREFIX", fmt.Errorf("%q: use up to 32 letters, digits, '_' or '-', starting with a letter or digit", c.NATS.Prefix))
	}
	c.NATS.CredsFile = e.file("MAILVET_NATS_CREDS")
	c.NATS.TLSCAFile = e.file("MAILVET_NATS_TLS_CA")
	c.NATS.TLSCertFile = e.file("MAILVET_NATS_TLS_CERT")
	c.NATS.TLSKeyFile = e.file("MAILVET_NATS_TLS_KEY")
	if (c.NATS.TLSCertFile == "") != (c.NATS.TLSKeyFile == "") {
		e.fail("MAILVET_NATS_TLS_CERT", errors.New("a client certificate needs MAILVET_NATS_TLS_CERT and MAILVET_NATS_TLS_KEY together"))
	}
	// The files' contents are checked here too: the NATS client reads them only when it connects,
	// and a process that cannot would wait for NATS for ever.
	e.natsFiles(&c.NATS)

	c.HTTPAddr = e.str("MAILVET_HTTP_ADDR", listenDefault(":8080", dev))
	e.check("MAILVET_HTTP_ADDR", validListenAddr(c.HTTPAddr))
	c.MetricsAddr = e.str("MAILVET_METRICS_ADDR", listenDefault(defaultMetricsAddr(role), dev))
	e.check("MAILVET_METRICS_ADDR", validListenAddr(c.MetricsAddr))
	if role == RoleAPI && sharePort(c.HTTPAddr, c.MetricsAddr) {
		e.fail("MAILVET_METRICS_ADDR", fmt.Errorf("%q takes the port of MAILVET_HTTP_ADDR %q: give the ops listener its own", c.MetricsAddr, c.HTTPAddr))
	}
	// Unset, the public URL is this server on its own port, so that the links a local run gives
	// out (error docs, list results, callbacks) reach it whatever port it listens on.
	publicDefault := "http://localhost:8080"
	if _, port, err := net.SplitHostPort(c.HTTPAddr); err == nil && port != "" {
		// A service name (":http-alt") listens on its number; a URL needs the number.
		if n, err := net.LookupPort("tcp", port); err == nil && n != 0 {
			publicDefault = "http://localhost:" + strconv.Itoa(n)
		}
	}
	c.PublicURL = strings.TrimRight(e.str("MAILVET_PUBLIC_URL", publicDefault), "/")
	e.check("MAILVET_PUBLIC_URL", validHTTPURL(c.PublicURL))
	// A scheme is case-insensitive (RFC 3986 §3.1): it is kept lower-case, so that what reads
	// the URL sees "https://" however it was written (the dashboard's cookies are Secure by it).
	if scheme, rest, ok := strings.Cut(c.PublicURL, "://"); ok {
		c.PublicURL = strings.ToLower(scheme) + "://" + rest
	}

	c.DNSResolver = e.str("MAILVET_DNS_RESOLVER", "")
	if c.DNSResolver == "" {
		c.DNSResolver = systemResolver()
	}
	e.check("MAILVET_DNS_RESOLVER", validHostPort(c.DNSResolver))

	c.SMTPPort = e.intIn("MAILVET_SMTP_PORT", 25, 1, 65535)
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	c.SMTPHelo = e.str("MAILVET_SMTP_HELO", host)
	if _, set := e.lookup("MAILVET_SMTP_HELO"); set && !validHelo(c.SMTPHelo) {
		// A name that is no host name goes into every EHLO: receivers refuse it, and every probe
		// would end unknown rather than the start-up.
		e.fail("MAILVET_SMTP_HELO", fmt.Errorf("%q is not a host name like mx1.example.com (or an address literal like [192.0.2.1])", c.SMTPHelo))
	}
	c.SMTPMailFrom = e.str("MAILVET_SMTP_MAIL_FROM", "verify@"+c.SMTPHelo)
	if _, set := e.lookup("MAILVET_SMTP_MAIL_FROM"); set && !validMailFrom(c.SMTPMailFrom) || !strings.Contains(c.SMTPMailFrom, "@") {
		e.fail("MAILVET_SMTP_MAIL_FROM", fmt.Errorf("%q is not an address like verify@example.com", c.SMTPMailFrom))
	}
	c.SMTPTimeout = e.duration("MAILVET_SMTP_TIMEOUT", 1500*time.Millisecond)
	c.GreylistWindow = e.window("MAILVET_GREYLIST_WINDOW", 15*time.Minute)
	c.AdmissionWindow = e.window("MAILVET_ADMISSION_WINDOW", time.Millisecond)
	if c.AdmissionWindow > maxAdmissionWindow {
		e.fail("MAILVET_ADMISSION_WINDOW", fmt.Errorf("%s is longer than %s", c.AdmissionWindow, maxAdmissionWindow))
	}
	c.ShutdownDelay = e.delay("MAILVET_SHUTDOWN_DELAY")
	c.SandboxRatePerMin = e.intIn("MAILVET_SANDBOX_RATE_PER_MIN", 1000, 1, 1_000_000)
	c.SMTPProxy = e.str("MAILVET_SMTP_PROXY", "")
	if c.SMTPProxy != "" {
		// The port is checked here: without one, every probe would fail to dial the proxy.
		u, err := url.Parse(c.SMTPProxy)
		if err != nil || u.Scheme != "socks5" || validHostPort(u.Host) != nil {
			e.fail("MAILVET_SMTP_PROXY", fmt.Errorf("%q is not socks5://host:port", redact.URL(c.SMTPProxy)))
		}
	}
	c.SMTPBlockedDomains = e.blockedDomains("MAILVET_SMTP_BLOCKED_DOMAINS")
	c.SMTPMaxPerHost = e.intIn("MAILVET_SMTP_MAX_PER_HOST", 20, 1, 10000)
	if v, ok := e.lookup("MAILVET_TRUSTED_PROXIES"); ok {
		trusted, err := netguard.ParsePrefixes(v)
		e.check("MAILVET_TRUSTED_PROXIES", err)
		c.TrustedProxies = trusted
	}
	if v, ok := e.lookup("MAILVET_SMTP_ALLOW_CIDRS"); ok {
		allow, err := netguard.ParsePrefixes(v)
		e.check("MAILVET_SMTP_ALLOW_CIDRS", err)
		c.SMTPAllowCIDRs = allow
	}

	c.DisposableExtraFile = e.file("MAILVET_DISPOSABLE_EXTRA_FILE")
	c.DisposableAllowFile = e.file("MAILVET_DISPOSABLE_ALLOW_FILE")

	c.StreamReplicas = e.intIn("MAILVET_STREAM_REPLICAS", 1, 1, 5)
	c.WebhookAllowPrivate = e.boolean("MAILVET_WEBHOOK_ALLOW_PRIVATE", false)

	c.Lists.MaxRows = e.intIn("MAILVET_LIST_MAX_ROWS", 1_000_000, 1, 10_000_000)
	c.Lists.MaxBytes = int64(e.intIn("MAILVET_LIST_MAX_BYTES", 100<<20, 1024, 1<<30))
	// A replica takes 8 uploads at once (internal/verification, lists.go): an address may hold 2 of them,
	// the free tier 4, and the rest stays for paying customers.
	c.Uploads.PerAddress = e.intIn("MAILVET_UPLOAD_SLOTS_PER_ADDRESS", 2, 1, 8)
	c.Uploads.Free = e.intIn("MAILVET_UPLOAD_SLOTS_FREE", 4, 0, 8)
	c.Uploads.MinRate = int64(e.intIn("MAILVET_UPLOAD_MIN_RATE", 8<<10, 0, 1<<30))
	free := e.retention("MAILVET_LIST_RETENTION_FREE", 7*24*time.Hour)
	paid := e.retention("MAILVET_LIST_RETENTION_PAID", 30*24*time.Hour)
	c.Lists.Retention = map[plan.Tier]time.Duration{}
	c.ResultRetention = e.retention("MAILVET_RESULT_RETENTION", 30*24*time.Hour)
	c.JobRetention = e.retention("MAILVET_JOB_RETENTION", 30*24*time.Hour)
	for _, t := range plan.Tiers {
		c.Lists.Retention[t] = paid
	}
	c.Lists.Retention[plan.Free] = free

	c.Plans = plan.Defaults()
	for _, v := range plan.Variables {
		for _, t := range v.Tiers {
			l := c.Plans[t]
			if v.Int != nil {
				*v.Int(&l) = e.intIn(v.Name(t), *v.Int(&l), v.Min, v.Max)
			} else {
				*v.Price(&l) = e.price(v.Name(t), *v.Price(&l))
			}
			c.Plans[t] = l
		}
	}

	c.StripeSecretKey = e.str("STRIPE_SECRET_KEY", "")
	c.StripeWebhookSecret = e.str("STRIPE_WEBHOOK_SECRET", "")
	c.Secrets, c.SecretsKeySet = e.secrets()
	c.StripeAPIBase = strings.TrimRight(e.str("MAILVET_STRIPE_API_BASE", ""), "/")
	if c.StripeAPIBase != "" {
		e.check("MAILVET_STRIPE_API_BASE", validHTTPURL(c.StripeAPIBase))
	}
	c.StripePrices = map[string]plan.Tier{}
	if id := e.str("MAILVET_STRIPE_PRICE_BUILDER", ""); id != "" {
		c.StripePrices[id] = plan.Builder
	}
	if id := e.str("MAILVET_STRIPE_PRICE_SCALE", ""); id != "" {
		if c.StripePrices[id] == plan.Builder {
			// One price cannot give two tiers: the map would silently keep the last.
			e.fail("MAILVET_STRIPE_PRICE_SCALE", fmt.Errorf("%q is MAILVET_STRIPE_PRICE_BUILDER's too", id))
		}
		c.StripePrices[id] = plan.Scale
	}
	c.DashboardSessionTTL = 12 * time.Hour
	if v, ok := e.lookup("MAILVET_DASHBOARD_SESSION_TTL"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 5*time.Minute || d > 30*24*time.Hour {
			e.fail("MAILVET_DASHBOARD_SESSION_TTL", fmt.Errorf("%q is not a duration from 5m to 720h, like 12h", v))
		} else {
			c.DashboardSessionTTL = d
		}
	}
	c.DashboardSessionIdle = time.Hour
	if v, ok := e.lookup("MAILVET_DASHBOARD_SESSION_IDLE"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 5*time.Minute || d > 30*24*time.Hour {
			e.fail("MAILVET_DASHBOARD_SESSION_IDLE", fmt.Errorf("%q is not a duration from 5m to 720h, like 1h", v))
		} else {
			c.DashboardSessionIdle = d
		}
	}
	c.Signup = e.str("MAILVET_DASHBOARD_SIGNUP", SignupConfirm)
	if c.Signup != SignupConfirm && c.Signup != SignupUnconfirmed && c.Signup != SignupOff {
		e.fail("MAILVET_DASHBOARD_SIGNUP", fmt.Errorf("%q: use %q, %q or %q", c.Signup, SignupConfirm, SignupUnconfirmed, SignupOff))
	}
	c.Mail = Mail{Addr: e.str("MAILVET_MAIL_SMTP_ADDR", ""), From: e.str("MAILVET_MAIL_FROM", ""),
		Username: e.str("MAILVET_MAIL_USERNAME", ""), Password: e.str("MAILVET_MAIL_PASSWORD", ""),
		AllowPlaintext: e.boolean("MAILVET_MAIL_ALLOW_PLAINTEXT", false)}
	if c.Mail.Addr != "" {
		e.check("MAILVET_MAIL_SMTP_ADDR", validHostPort(c.Mail.Addr))
		if c.Mail.From == "" {
			e.fail("MAILVET_MAIL_FROM", errors.New("must be set with MAILVET_MAIL_SMTP_ADDR"))
		}
	}
	if c.Mail.From != "" {
		if a, err := mail.ParseAddress(c.Mail.From); err != nil || a.Name != "" || a.Address != c.Mail.From {
			e.fail("MAILVET_MAIL_FROM", fmt.Errorf("%q is not a plain address like noreply@example.com", c.Mail.From))
		}
	}
	if (c.Mail.Username == "") != (c.Mail.Password == "") {
		e.fail("MAILVET_MAIL_USERNAME", errors.New("set both MAILVET_MAIL_USERNAME and MAILVET_MAIL_PASSWORD, or neither"))
	}
	c.ConfirmTTL = e.ttl("MAILVET_EMAIL_CONFIRM_TTL", 24*time.Hour, time.Hour, 7*24*time.Hour)
	c.ResetTTL = e.ttl("MAILVET_PASSWORD_RESET_TTL", time.Hour, 5*time.Minute, 24*time.Hour)

	c.AuditRetention = 8760 * time.Hour
	if v, ok := e.lookup("MAILVET_AUDIT_RETENTION"); ok {
		// At least a day, so that last night's events are there in the morning; at most ten years.
		d, err := time.ParseDuration(v)
		if err != nil || d < 24*time.Hour || d > 87600*time.Hour {
			e.fail("MAILVET_AUDIT_RETENTION", fmt.Errorf("%q is not a duration from 24h to 87600h (ten years), like 8760h", v))
		} else {
			c.AuditRetention = d
		}
	}

	return c, e.err()
}

// DevHost is the interface dev mode listens on by default: `make run` prints working keys, so
// its listeners must not be reachable from the network unless the operator says so by setting
// MAILVET_HTTP_ADDR or MAILVET_METRICS_ADDR.
const DevHost = "127.0.0.1"

// listenDefault is the default listen address addr (":port", every interface), on DevHost in dev
// mode.
func listenDefault(addr string, dev bool) string {
	if dev {
		return DevHost + addr
	}
	return addr
}

func defaultMetricsAddr(role Role) string {
	switch role {
	case RoleVerifier:
		return ":9091"
	case RoleWebhook:
		return ":9092"
	default:
		return ":9090"
	}
}

// systemResolver returns the first nameserver of /etc/resolv.conf, or a loopback resolver when
// the file is missing, so that a machine without DNS still starts (look-ups then fail as unknown).
func systemResolver() string {
	cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil || len(cc.Servers) == 0 {
		return "127.0.0.1:53"
	}
	return net.JoinHostPort(cc.Servers[0], cc.Port)
}

// secrets reads MAILVET_SECRETS_KEY and MAILVET_SECRETS_KEY_OLD. The errors never repeat a value.
func (e *env) secrets() (*sealed.Keys, bool) {
	cur, set := e.lookup("MAILVET_SECRETS_KEY")
	old, oldSet := e.lookup("MAILVET_SECRETS_KEY_OLD")
	if !set {
		if oldSet {
			e.fail("MAILVET_SECRETS_KEY_OLD", errors.New("needs MAILVET_SECRETS_KEY: the old key only opens values while the new one seals them"))
		}
		return sealed.Process(), false
	}
	ck, err := sealed.ParseKey(cur)
	if err != nil {
		e.fail("MAILVET_SECRETS_KEY", err)
		return sealed.Process(), false
	}
	var ok []byte
	if oldSet {
		if ok, err = sealed.ParseKey(old); err != nil {
			e.fail("MAILVET_SECRETS_KEY_OLD", err)
			return sealed.Process(), false
		}
	}
	k, err := sealed.New(ck, ok)
	if err != nil {
		e.fail("MAILVET_SECRETS_KEY", err)
		return sealed.Process(), false
	}
	return k, true
}

// ErrNoSecretsKey is RequireSecretsKey's refusal.
var ErrNoSecretsKey = errors.New("MAILVET_SECRETS_KEY: must be set: webhook secrets are stored sealed under it " +
	"(32 random bytes as base64, e.g. `openssl rand -base64 32`, or as 64 hex digits; the same key on every API " +
	"and webhook-worker process; docs/operations.md, \"Secrets at rest\")")

// RequireSecretsKey is the check of the processes that seal or open webhook secrets (the API and
// the webhook worker): outside dev mode they must not run on a key that dies with them, which
// would leave every stored secret unreadable after a restart and differ between replicas.
func (c Config) RequireSecretsKey() error {
	if c.SecretsKeySet || c.Dev {
		return nil
	}
	return ErrNoSecretsKey
}

// env collects the errors of one Load call.
type env struct {
	getenv func(string) string
	errs   []error
}

func (e *env) fail(name string, err error) {
	e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
}

func (e *env) check(name string, err error) {
	if err != nil {
		e.fail(name, err)
	}
}

func (e *env) err() error { return errors.Join(e.errs...) }

func (e *env) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// lookup treats a variable set to only blanks as unset.
func (e *env) lookup(name string) (string, bool) {
	v := strings.TrimSpace(e.getenv(name))
	return v, v != ""
}

func (e *env) intIn(name string, def, min, max int) int {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		e.fail(name, fmt.Errorf("%q is not a whole number from %d to %d", v, min, max))
		return def
	}
	return n
}

// ttl is a duration from lo to hi, def when unset.
func (e *env) ttl(name string, def, lo, hi time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		e.fail(name, fmt.Errorf("%q is not a duration from %s to %s, like %s", v, short(lo), short(hi), short(def)))
		return def
	}
	return d
}

// short writes a whole number of hours or minutes as people write them: 24h, 5m.
func short(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimSuffix(d.String(), "0s"), "0m")
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > time.Minute {
		e.fail(name, fmt.Errorf("%q is not a duration between 0 and 1m, like 1500ms", v))
		return def
	}
	return d
}

// delay reads a duration from 0 (none, the default) to 1m, like 5s.
func (e *env) delay(name string) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Minute {
		e.fail(name, fmt.Errorf("%q is not a duration from 0 to 1m, like 5s", v))
		return 0
	}
	return d
}

// window reads a duration from 0 (off) to 24h, like 15m.
func (e *env) window(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > 24*time.Hour {
		e.fail(name, fmt.Errorf("%q is not a duration from 0 (off) to 24h, like 15m", v))
		return def
	}
	return d
}

// retention is a keep-for duration of an hour up to a year, like 168h.
func (e *env) retention(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Hour || d > 366*24*time.Hour {
		e.fail(name, fmt.Errorf("%q is not a duration from 1h to 8784h (a year), like 168h", v))
		return def
	}
	return d
}

func (e *env) boolean(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, fmt.Errorf("%q is not true or false", v))
		return def
	}
	return b
}

func (e *env) price(name string, def float64) float64 {
	v, ok := e.lookup(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 1000) { // NaN fails both comparisons
		e.fail(name, fmt.Errorf("%q is not a price in EUR from 0 to 1000", v))
		return def
	}
	return f
}

func (e *env) list(name string) []string {
	v, _ := e.lookup(name)
	var out []string
	for _, part := range strings.Split(v, ",") {
		if p := strings.ToLower(strings.TrimSpace(part)); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// file checks at start-up that a configured file can be read, rather than at the first request.
// A directory opens without error but cannot be read as a file, so it is refused here too.
func (e *env) file(name string) string {
	v, ok := e.lookup(name)
	if !ok {
		return ""
	}
	f, err := os.Open(v)
	if err != nil {
		e.fail(name, err)
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		e.fail(name, err)
		return ""
	} else if !st.Mode().IsRegular() {
		e.fail(name, fmt.Errorf("%s is not a regular file", v))
		return ""
	}
	return v
}

// blockedDomains reads MAILVET_SMTP_BLOCKED_DOMAINS: domain names (each covers its subdomains,
// so a leading "*." adds nothing and is dropped; "*.tld" is every domain under a top-level
// domain) and "name.*" patterns (the name under any public suffix of one or two labels). Anything else would silently match nothing, so it is
// refused. Names are stored as the prober compares them: ASCII (A-labels), lower case.
func (e *env) blockedDomains(name string) []string {
	var out []string
	for _, entry := range e.list(name) {
		d, star := strings.CutPrefix(strings.TrimSuffix(entry, "."), "*.")
		label, wildcard := strings.CutSuffix(d, ".*")
		if wildcard {
			d = label
		}
		ascii, err := idna.Lookup.ToASCII(d)
		switch {
		case err != nil || !dnsname.Valid(ascii):
			e.fail(name, fmt.Errorf("%q is not a domain name or a name.* pattern", entry))
			continue
		case wildcard && strings.Contains(ascii, "."):
			e.fail(name, fmt.Errorf("%q: a name.* pattern takes one label before .* (yahoo.*)", entry))
			continue
		case !wildcard && !star && !strings.Contains(ascii, "."):
			// "yahoo" is likelier a forgotten ".*" than a top-level domain; *.tld says the latter.
			e.fail(name, fmt.Errorf("%q is a single label: write name.* for the name under any suffix, or *.%s for every domain under the top-level domain", entry, entry))
			continue
		}
		if wildcard {
			ascii += ".*"
		}
		out = append(out, ascii)
	}
	return out
}

// NATSOptions are the NATS settings besides NATS_URL (docs/operations.md, "NATS").
type NATSOptions struct {
	// Prefix namespaces every stream, consumer, subject and bucket (MAILVET_NATS_PREFIX), so that
	// deployments can share a cluster.
	Prefix string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed), MAILVET_NATS_CREDS.
	CredsFile string
	// TLSCAFile verifies the servers' certificates; TLSCertFile and TLSKeyFile are a client
	// certificate for clusters that require one (MAILVET_NATS_TLS_*).
	TLSCAFile, TLSCertFile, TLSKeyFile string
}

// natsPrefix is one subject token that is also valid in stream, consumer and bucket names: no
// dots, wildcards or spaces.
var natsPrefix = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)

// validNATSURL checks one entry of NATS_URL.
func validNATSURL(s string) error {
	if !strings.Contains(s, "://") {
		s = "nats://" + s // the client reads host:port as nats://host:port
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s is not a URL like nats://host:4222 (several are separated by commas)", shownURL(s))
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
		// A port the client cannot dial would make the process wait for NATS for ever.
		if p := u.Port(); p != "" && !dialPort(p) || strings.HasSuffix(u.Host, ":") {
			return fmt.Errorf("%q: the port is not a number from 1 to 65535", redact.URL(s))
		}
		return nil
	}
	return fmt.Errorf("%q: the scheme must be nats, tls, ws or wss", redact.URL(s))
}

func validPostgresURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return errors.New("must start with postgres://")
	}
	// The pool reads the URL only when it connects: its parameters (sslmode, connect_timeout,
	// pool_max_conns, a port) are checked here with the other variables. pgx masks the password
	// in its errors.
	if _, err := pgxpool.ParseConfig(s); err != nil {
		return err
	}
	return nil
}

// validListenAddr checks a listen address (MAILVET_HTTP_ADDR, MAILVET_METRICS_ADDR) here, with the
// other variables, rather than when the listener binds it after the waits for Postgres and NATS.
// The port is what net.Listen accepts: a number from 0 to 65535, a service name it resolves
// (":http-alt"), or empty (any free port, like 0).
func validListenAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port (like :8080)", s)
	}
	if port != "" && !validPort(port) {
		return fmt.Errorf("%q: the port %q is not a number from 0 to 65535 or a known service name", s, port)
	}
	return nil
}

// sharePort tells whether two listen addresses would take one port: the same port number, other
// than 0, on the same host or with either on every interface.
func sharePort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, errA := net.LookupPort("tcp", pa)
	nb, errB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || na == 0 || na != nb {
		return false
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || any(ha) || any(hb)
}

// validPort tells whether port is a number from 0 to 65535 or a service name, resolved the way the
// listener and the dialer resolve it (net.LookupPort).
func validPort(port string) bool {
	_, err := net.LookupPort("tcp", port)
	return err == nil
}

// dialPort tells whether port is one a client can dial: a number from 1 to 65535 or a service name.
func dialPort(port string) bool {
	n, err := net.LookupPort("tcp", port)
	return err == nil && n != 0
}

func validHostPort(s string) error {
	h, p, err := net.SplitHostPort(s)
	if err != nil || h == "" || p == "" {
		return fmt.Errorf("%q is not host:port (like 127.0.0.1:53)", s)
	}
	if n, err := net.LookupPort("udp", p); err != nil || n == 0 {
		return fmt.Errorf("%q: the port %q is not a number from 1 to 65535 or a known service name", s, p)
	}
	return nil
}

// shownURL is a URL as an error shows it: quoted, its credentials masked (package redact). One
// that does not parse cannot be masked, so it is not shown at all.
func shownURL(s string) string {
	r := redact.URL(s)
	if strings.HasPrefix(r, "(unparsable") {
		return "the value (not shown: it does not parse as a URL, and could hold a password)"
	}
	return strconv.Quote(r)
}

// validHTTPURL checks an http(s) base URL. A URL may carry a user and password, so the value is
// echoed with its credentials masked (package redact), like NATS_URL's.
func validHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s is not an http(s) URL like https://api.example.com", shownURL(s))
	}
	if p := u.Port(); p != "" && !dialPort(p) || strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%q: the port is not a number from 1 to 65535", redact.URL(s))
	}
	return nil
}

// validHelo tells whether s can stand in EHLO (RFC 5321 §4.1.1.1): a host name (letters, digits
// and hyphens in dot-separated labels, any case, IDNs as A-labels) or an address literal.
func validHelo(s string) bool {
	if lit, ok := strings.CutPrefix(s, "["); ok {
		lit, ok = strings.CutSuffix(lit, "]")
		if v6, isV6 := strings.CutPrefix(lit, "IPv6:"); isV6 {
			a, err := netip.ParseAddr(v6)
			return ok && err == nil && a.Is6()
		}
		a, err := netip.ParseAddr(lit)
		return ok && err == nil && a.Is4()
	}
	ascii, err := idna.Lookup.ToASCII(s)
	return err == nil && dnsname.Valid(ascii)
}

// validMailFrom tells whether s can stand in MAIL FROM:<s>: a local part without blanks, control
// characters or angle brackets, "@", and a domain as validHelo takes it.
func validMailFrom(s string) bool {
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return false
	}
	for _, r := range s[:i] {
		if r <= ' ' || r == 0x7f || r == '<' || r == '>' || r == '@' && s[0] != '"' {
			return false
		}
	}
	return validHelo(s[i+1:])
}

// natsFiles checks that the NATS credentials and TLS files hold what the client will read from
// them: a credentials file with a user JWT and an NKey seed, PEM certificates, a key that
// matches its certificate.
func (e *env) natsFiles(o *NATSOptions) {
	if o.CredsFile != "" {
		b, err := os.ReadFile(o.CredsFile)
		if err == nil {
			if _, err = nkeys.ParseDecoratedJWT(b); err == nil {
				_, err = nkeys.ParseDecoratedUserNKey(b)
			}
		}
		if err != nil {
			e.fail("MAILVET_NATS_CREDS", fmt.Errorf("%s is not a NATS credentials file (a user JWT and its NKey seed): %w", o.CredsFile, err))
		}
	}
	if o.TLSCAFile != "" {
		b, err := os.ReadFile(o.TLSCAFile)
		if err != nil || !x509.NewCertPool().AppendCertsFromPEM(b) {
			e.fail("MAILVET_NATS_TLS_CA", fmt.Errorf("%s holds no PEM certificate", o.TLSCAFile))
		}
	}
	if o.TLSCertFile != "" && o.TLSKeyFile != "" {
		if _, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile); err != nil {
			e.fail("MAILVET_NATS_TLS_CERT", fmt.Errorf("with MAILVET_NATS_TLS_KEY: %w", err))
		}
	}
}
