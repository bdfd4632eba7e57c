package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != DefaultDatabaseURL || c.NatsURL != "nats://127.0.0.1:4222" {
		t.Errorf("urls: %q %q", c.DatabaseURL, c.NatsURL)
	}
	if c.HTTPAddr != ":8080" || c.MetricsAddr != ":9091" {
		t.Errorf("addrs: %q %q", c.HTTPAddr, c.MetricsAddr)
	}
	if c.SMTPPort != 25 || c.SMTPTimeout != 1500*time.Millisecond || c.SMTPMaxPerHost != 20 {
		t.Errorf("smtp: %d %v %d", c.SMTPPort, c.SMTPTimeout, c.SMTPMaxPerHost)
	}
	if c.GreylistWindow != 15*time.Minute {
		t.Errorf("greylist window %v", c.GreylistWindow)
	}
	if c.AdmissionWindow != time.Millisecond {
		t.Errorf("admission window %v", c.AdmissionWindow)
	}
	if c.SMTPMailFrom != "verify@"+c.SMTPHelo {
		t.Errorf("mail from %q, helo %q", c.SMTPMailFrom, c.SMTPHelo)
	}
	if got, want := c.Plans, plan.Defaults(); got[plan.Free] != want[plan.Free] || got[plan.Scale] != want[plan.Scale] {
		t.Errorf("plans %v", got)
	}
	if c.Plans[plan.Builder] != (plan.Limits{MonthlyCalls: 5000, RateLimitPerMin: 100, MaxKeys: 5, OverageEUR: 0.004}) {
		t.Errorf("builder plan %+v", c.Plans[plan.Builder])
	}
	if c.Plans[plan.Scale].OverageEUR != 0.002 || c.Plans[plan.Free].OverageEUR != 0 {
		t.Errorf("overage %+v", c.Plans)
	}
	if len(c.SMTPAllowCIDRs) != 0 {
		t.Errorf("smtp allow %v, want none", c.SMTPAllowCIDRs)
	}
	if c.StreamReplicas != 1 || c.WebhookAllowPrivate {
		t.Errorf("replicas %d allow private %v", c.StreamReplicas, c.WebhookAllowPrivate)
	}
	if c.AuditRetention != 8760*time.Hour {
		t.Errorf("audit retention %v, want a year", c.AuditRetention)
	}
}

func TestLoadMetricsAddrPerRole(t *testing.T) {
	t.Parallel()
	for role, want := range map[Role]string{RoleAPI: ":9090", RoleVerifier: ":9091", RoleWebhook: ":9092"} {
		c, err := Load(role, false, envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		if c.MetricsAddr != want {
			t.Errorf("%s: metrics addr %q, want %q", role, c.MetricsAddr, want)
		}
	}
}

func TestLoadDevEmbeddedNATS(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, true, envOf(nil))
	if err != nil || c.NatsURL != "" {
		t.Fatalf("dev NATS_URL = %q, %v; want empty (embedded)", c.NatsURL, err)
	}
	// Outside dev mode a blank NATS_URL means the default, never an embedded server.
	c, err = Load(RoleAPI, false, envOf(map[string]string{"NATS_URL": " "}))
	if err != nil || c.NatsURL != "nats://127.0.0.1:4222" {
		t.Fatalf("NATS_URL = %q, %v; want the default", c.NatsURL, err)
	}
}

// Dev mode prints live keys, so its listeners stay on loopback unless an address is set.
func TestLoadDevListensOnLoopback(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, true, envOf(nil))
	if err != nil || c.HTTPAddr != "127.0.0.1:8080" || c.MetricsAddr != "127.0.0.1:9090" {
		t.Fatalf("dev addrs %q %q, %v; want loopback", c.HTTPAddr, c.MetricsAddr, err)
	}
	c, err = Load(RoleAPI, true, envOf(map[string]string{"MAILVET_HTTP_ADDR": ":8081", "MAILVET_METRICS_ADDR": "0.0.0.0:9999"}))
	if err != nil || c.HTTPAddr != ":8081" || c.MetricsAddr != "0.0.0.0:9999" {
		t.Fatalf("explicit dev addrs %q %q, %v; want them kept", c.HTTPAddr, c.MetricsAddr, err)
	}
}

// Unset, the public URL follows the API's port, so that a local run on another port links to
// itself (error docs, results_url, callbacks).
func TestLoadPublicURLFollowsThePort(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{"": "http://localhost:8080", "127.0.0.1:8081": "http://localhost:8081",
		":9000": "http://localhost:9000", "127.0.0.1:0": "http://localhost:8080", "localhost:http-alt": "http://localhost:8080",
		":https": "http://localhost:443"} {
		c, err := Load(RoleAPI, true, func(k string) string {
			if k == "MAILVET_HTTP_ADDR" {
				return addr
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.PublicURL != want {
			t.Errorf("MAILVET_HTTP_ADDR=%q: public URL %q, want %q", addr, c.PublicURL, want)
		}
	}
}

func TestLoadOverrides(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, false, envOf(map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS":       "50",
		"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "5000",
		"MAILVET_PLAN_BUILDER_MAX_KEYS":         "7",
		"MAILVET_SMTP_BLOCKED_DOMAINS":          " Example.COM, ,foo.test ",
		"MAILVET_SMTP_TIMEOUT":                  "750ms",
		"MAILVET_WEBHOOK_ALLOW_PRIVATE":         "true",
		"MAILVET_STRIPE_PRICE_BUILDER":          "price_b",
		"MAILVET_STRIPE_PRICE_SCALE":            "price_s",
		"MAILVET_PUBLIC_URL":                    "HTTPS://api.example.com/",
		"MAILVET_SMTP_PROXY":                    "socks5://127.0.0.1:1080",
		"MAILVET_GREYLIST_WINDOW":               "1h30m",
		"MAILVET_ADMISSION_WINDOW":              "0",
		"MAILVET_AUDIT_RETENTION":               "2160h",
		"MAILVET_MAIL_ALLOW_PLAINTEXT":          "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Plans[plan.Free].MonthlyCalls != 50 || c.Plans[plan.Scale].RateLimitPerMin != 5000 || c.Plans[plan.Builder].MaxKeys != 7 {
		t.Errorf("plans %+v", c.Plans)
	}
	if strings.Join(c.SMTPBlockedDomains, "|") != "example.com|foo.test" {
		t.Errorf("blocked %q", c.SMTPBlockedDomains)
	}
	if c.SMTPTimeout != 750*time.Millisecond || !c.WebhookAllowPrivate {
		t.Errorf("timeout %v allow %v", c.SMTPTimeout, c.WebhookAllowPrivate)
	}
	if c.StripePrices["price_b"] != plan.Builder || c.StripePrices["price_s"] != plan.Scale {
		t.Errorf("prices %v", c.StripePrices)
	}
	if c.GreylistWindow != 90*time.Minute {
		t.Errorf("greylist window %v", c.GreylistWindow)
	}
	if c.AdmissionWindow != 0 {
		t.Errorf("admission window %v, want 0 (each request alone)", c.AdmissionWindow)
	}
	if c.PublicURL != "https://api.example.com" {
		t.Errorf("public url %q", c.PublicURL)
	}
	if c.AuditRetention != 90*24*time.Hour {
		t.Errorf("audit retention %v", c.AuditRetention)
	}
	if !c.Mail.AllowPlaintext {
		t.Error("MAILVET_MAIL_ALLOW_PLAINTEXT=true not read")
	}
}

func TestLoadSMTPAllowCIDRs(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_SMTP_ALLOW_CIDRS": " 127.0.0.0/8, fd00::/8 ,"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	if !slices.Equal(c.SMTPAllowCIDRs, want) {
		t.Errorf("allow %v, want %v", c.SMTPAllowCIDRs, want)
	}
	for _, bad := range []string{"127.0.0.1", "localhost", "10.0.0.0/8;fd00::/8"} {
		_, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_SMTP_ALLOW_CIDRS": bad}))
		if err == nil || !strings.Contains(err.Error(), "MAILVET_SMTP_ALLOW_CIDRS:") {
			t.Errorf("%q: err %v, want one naming MAILVET_SMTP_ALLOW_CIDRS", bad, err)
		}
	}
}

// Every bad variable is named in the error, all of them in one go.
func TestLoadErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"DATABASE_URL":                  "mysql://x",
		"MAILVET_LOG_FORMAT":            "pretty",
		"MAILVET_HTTP_ADDR":             "8080",
		"MAILVET_SMTP_PORT":             "70000",
		"MAILVET_SMTP_TIMEOUT":          "soon",
		"MAILVET_GREYLIST_WINDOW":       "25h",
		"MAILVET_ADMISSION_WINDOW":      "1s",
		"MAILVET_SHUTDOWN_DELAY":        "2m",
		"MAILVET_SMTP_PROXY":            "http://proxy:3128",
		"MAILVET_SMTP_MAIL_FROM":        "nobody",
		"MAILVET_SMTP_ALLOW_CIDRS":      "127.0.0.0/8,10.0.0.0/33",
		"MAILVET_STREAM_REPLICAS":       "0",
		"MAILVET_WEBHOOK_ALLOW_PRIVATE": "maybe",
		"MAILVET_OVERAGE_EUR_SCALE":     "-1",
		"MAILVET_PLAN_FREE_MAX_KEYS":    "two",
		"MAILVET_DNS_RESOLVER":          "8.8.8.8",
		"MAILVET_PUBLIC_URL":            "ftp://x",
		"MAILVET_DISPOSABLE_EXTRA_FILE": "/nonexistent/extra.txt",
		"MAILVET_AUDIT_RETENTION":       "1h",
		"MAILVET_MAIL_ALLOW_PLAINTEXT":  "sometimes",
	}
	_, err := Load(RoleAPI, false, envOf(bad))
	if err == nil {
		t.Fatal("want an error")
	}
	for name := range bad {
		if !strings.Contains(err.Error(), name+":") {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
}

// Every plan variable (plan.Variables) is read for every tier it applies to, so a limit added
// to package plan is configurable without touching this package.
func TestEveryPlanVariableIsRead(t *testing.T) {
	t.Parallel()
	for _, v := range plan.Variables {
		for _, tier := range v.Tiers {
			value := "7"
			c, err := Load(RoleAPI, false, envOf(map[string]string{v.Name(tier): value}))
			if err != nil {
				t.Fatalf("%s=%s: %v", v.Name(tier), value, err)
			}
			l := c.Plans[tier]
			if v.Int != nil && *v.Int(&l) != 7 || v.Price != nil && *v.Price(&l) != 7 {
				t.Errorf("%s=7 left %s at %+v", v.Name(tier), tier, l)
			}
		}
	}
}

// A blocked-domains entry that would match nothing, and a domains file that is a directory, stop
// the start-up naming the variable; accepted entries are stored as the prober compares them. (A
// domains file's lines are checked by verifyworker.EngineConfig.)
func TestLoadRefusesWhatWouldMatchNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, value := range map[string]string{
		"MAILVET_SMTP_BLOCKED_DOMAINS":  "acme.example,yahoo",
		"MAILVET_DISPOSABLE_ALLOW_FILE": dir,
	} {
		_, err := Load(RoleVerifier, false, envOf(map[string]string{name: value, "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
		if err == nil || !strings.Contains(err.Error(), name+":") {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, value, err)
		}
	}
	for _, bad := range []string{"a*b.example", "mail.yahoo.*", "x@acme.example", "acme..example", "http://acme.example"} {
		if _, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_SMTP_BLOCKED_DOMAINS": bad, "MAILVET_DNS_RESOLVER": "127.0.0.1:53"})); err == nil {
			t.Errorf("MAILVET_SMTP_BLOCKED_DOMAINS=%q accepted", bad)
		}
	}
	c, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_SMTP_BLOCKED_DOMAINS": " ACME.Example ,*.test,Corp.*,bücher.example.", "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"acme.example", "test", "corp.*", "xn--bcher-kva.example"}; !slices.Equal(c.SMTPBlockedDomains, want) {
		t.Errorf("blocked domains %q, want %q", c.SMTPBlockedDomains, want)
	}
}

// A refused URL is named in the error without its credentials, a bare token included.
func TestLoadErrorsDoNotEchoCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, secret string }{
		{"NATS_URL", "http://s3cr3ttoken@h:4222", "s3cr3ttoken"},
		{"NATS_URL", "mqtt://ann:hunter2@h", "hunter2"},
		{"MAILVET_STRIPE_API_BASE", "ftp://u:SECRETPW@h", "SECRETPW"},
		{"MAILVET_STRIPE_API_BASE", "https://u:SECRETPW@", "SECRETPW"},
		{"MAILVET_PUBLIC_URL", "https://u:SECRETPW@", "SECRETPW"},
		{"MAILVET_PUBLIC_URL", "ftp://u:SECRETPW@api.example.com", "SECRETPW"},
	} {
		_, err := Load(RoleAPI, false, envOf(map[string]string{tc.name: tc.url}))
		if err == nil || !strings.Contains(err.Error(), tc.name+":") {
			t.Fatalf("%s=%s: error %v, want one naming %s", tc.name, tc.url, err, tc.name)
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Errorf("%s: the error carries %q: %v", tc.name, tc.secret, err)
		}
	}
}

// A listen address whose port no listener could bind is refused with the other variables, before
// the process waits for Postgres and NATS; named ports that resolve are kept.
func TestLoadChecksListenPorts(t *testing.T) {
	t.Parallel()
	_, err := Load(RoleAPI, false, envOf(map[string]string{
		"MAILVET_HTTP_ADDR":    "127.0.0.1:99999",
		"MAILVET_METRICS_ADDR": "127.0.0.1:70000",
		"MAILVET_DNS_RESOLVER": "127.0.0.1:65536",
	}))
	for _, name := range []string{"MAILVET_HTTP_ADDR:", "MAILVET_METRICS_ADDR:", "MAILVET_DNS_RESOLVER:"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v, want one naming %s", err, name)
		}
	}
	for _, bad := range []string{":-1", ":nosuchservice", "[::1]:80000", "localhost:8o80"} {
		if _, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_METRICS_ADDR": bad})); err == nil {
			t.Errorf("MAILVET_METRICS_ADDR=%q accepted", bad)
		}
	}
	for _, good := range []string{":0", ":65535", "127.0.0.1:", "[::1]:9090", "localhost:http-alt", ":https"} {
		// Each on its own: the API's two listeners on one port are refused (ops_test.go).
		if _, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_HTTP_ADDR": good, "MAILVET_METRICS_ADDR": "127.0.0.2:1"})); err != nil {
			t.Errorf("MAILVET_HTTP_ADDR=%q refused: %v", good, err)
		}
		if _, err := Load(RoleWebhook, false, envOf(map[string]string{"MAILVET_METRICS_ADDR": good})); err != nil {
			t.Errorf("MAILVET_METRICS_ADDR=%q refused: %v", good, err)
		}
	}
}
