package config

import (
	"strings"
	"testing"
)

// Values Load refuses although they parse, because the process could never use them: each would
// surface only later, as probes that all fail, a wait for NATS that never ends, or a price that
// breaks every comparison (docs/operations.md, "Configuration": a bad value stops the process at
// start-up with an error that names the variable).
func TestLoadRefusesValuesThatWouldFailLater(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value string }{
		{"MAILVET_OVERAGE_EUR_SCALE", "NaN"},
		{"MAILVET_OVERAGE_EUR_BUILDER", "nan"},
		{"MAILVET_SMTP_PROXY", "socks5://proxy.example"},
		{"MAILVET_SMTP_PROXY", "socks5://proxy.example:99999"},
		{"MAILVET_SMTP_PROXY", "socks5://:1080"},
		{"MAILVET_SMTP_HELO", "mx1 example.com"},
		{"MAILVET_SMTP_HELO", "mx1.example.com\r\nRSET"},
		{"MAILVET_SMTP_HELO", "<mx1.example.com>"},
		{"MAILVET_SMTP_HELO", "[192.0.2.300]"},
		{"MAILVET_SMTP_MAIL_FROM", "verify@"},
		{"MAILVET_SMTP_MAIL_FROM", "@example.com"},
		{"MAILVET_SMTP_MAIL_FROM", "ver ify@example.com"},
		{"MAILVET_SMTP_MAIL_FROM", "<verify@example.com>"},
		{"MAILVET_SMTP_MAIL_FROM", "verify@example.com>"},
		{"MAILVET_SMTP_MAIL_FROM", "verify@exa mple.com"},
		{"NATS_URL", "nats://127.0.0.1:99999"},
		{"MAILVET_PUBLIC_URL", "https://api.example.com:99999"},
		{"MAILVET_STRIPE_API_BASE", "http://127.0.0.1:0"},
	} {
		_, err := Load(RoleVerifier, false, envOf(map[string]string{tc.name: tc.value, "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
		if err == nil || !strings.Contains(err.Error(), tc.name+":") {
			t.Errorf("%s=%q: error %v, want one naming the variable", tc.name, tc.value, err)
		}
		if err != nil && strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%s=%q: want one line, got %q", tc.name, tc.value, err)
		}
	}
	for _, tc := range []struct{ name, value string }{
		{"MAILVET_OVERAGE_EUR_SCALE", "0.0015"},
		{"MAILVET_SMTP_PROXY", "socks5://user:pw@proxy.example:1080"},
		{"MAILVET_SMTP_HELO", "MX1.Example.com"},
		{"MAILVET_SMTP_HELO", "[192.0.2.1]"},
		{"MAILVET_SMTP_HELO", "[IPv6:2001:db8::1]"},
		{"MAILVET_SMTP_HELO", "bücher.example"},
		{"MAILVET_SMTP_MAIL_FROM", "bounce+probe@mx1.example.com"},
	} {
		if _, err := Load(RoleVerifier, false, envOf(map[string]string{tc.name: tc.value, "MAILVET_DNS_RESOLVER": "127.0.0.1:53"})); err != nil {
			t.Errorf("%s=%q refused: %v", tc.name, tc.value, err)
		}
	}
}

// The API's two listeners on one port: the second bind would fail, but only after the waits for
// Postgres and NATS, so it is refused with the rest of the configuration.
func TestLoadRefusesOneListenPortForBoth(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{{":8080", ":8080"}, {"127.0.0.1:9000", "127.0.0.1:9000"}, {":9000", "127.0.0.1:9000"}, {"[::1]:9000", ":9000"}} {
		_, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_HTTP_ADDR": pair[0], "MAILVET_METRICS_ADDR": pair[1], "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
		if err == nil || !strings.Contains(err.Error(), "MAILVET_METRICS_ADDR:") {
			t.Errorf("%v: error %v, want one naming MAILVET_METRICS_ADDR", pair, err)
		}
	}
	for _, pair := range [][2]string{{":0", ":0"}, {"127.0.0.1:9000", "127.0.0.2:9000"}, {":8080", ":9090"}} {
		if _, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_HTTP_ADDR": pair[0], "MAILVET_METRICS_ADDR": pair[1], "MAILVET_DNS_RESOLVER": "127.0.0.1:53"})); err != nil {
			t.Errorf("%v refused: %v", pair, err)
		}
	}
	// The workers serve no API: their MAILVET_HTTP_ADDR is not bound.
	if _, err := Load(RoleVerifier, false, envOf(map[string]string{"MAILVET_METRICS_ADDR": ":8080", "MAILVET_DNS_RESOLVER": "127.0.0.1:53"})); err != nil {
		t.Errorf("verifier with the metrics port on :8080 refused: %v", err)
	}
}

// One Stripe price id for both paid plans would give every subscription to it the tier read last.
func TestLoadRefusesOnePriceForTwoTiers(t *testing.T) {
	t.Parallel()
	_, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_STRIPE_PRICE_BUILDER": "price_1", "MAILVET_STRIPE_PRICE_SCALE": "price_1", "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
	if err == nil || !strings.Contains(err.Error(), "MAILVET_STRIPE_PRICE_SCALE:") {
		t.Errorf("error %v, want one naming MAILVET_STRIPE_PRICE_SCALE", err)
	}
}

// The errors of URLs say what is wrong once, and never quote a placeholder as if it were the
// value: NATS_URL's empty entries are one error, and a URL that does not parse is not shown.
func TestLoadURLErrorsAreReadable(t *testing.T) {
	t.Parallel()
	_, err := Load(RoleVerifier, false, envOf(map[string]string{"NATS_URL": ",nats://n1:4222,,", "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
	if err == nil || strings.Count(err.Error(), "NATS_URL:") != 1 || !strings.Contains(err.Error(), "empty entry") {
		t.Errorf("NATS_URL with empty entries: error %v, want one saying so", err)
	}
	for name, value := range map[string]string{"MAILVET_PUBLIC_URL": "localhost:8080", "NATS_URL": "nats://u:hunter2@n1:x"} {
		_, err := Load(RoleAPI, false, envOf(map[string]string{name: value, "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}))
		if err == nil || !strings.Contains(err.Error(), name+": the value (not shown") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s=%q: error %v", name, value, err)
		}
	}
}
