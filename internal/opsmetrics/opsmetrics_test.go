package opsmetrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/opsmetrics"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// observedVerifier is a Verifier pointed at a loopback mail world, reporting to a fresh registry.
func observedVerifier(t *testing.T) (*verify.Verifier, *prometheus.Registry) {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if _, err := w.AddServer(mailsim.ServerOptions{Name: "mx.acme.test"}); err != nil {
		t.Fatal(err)
	}
	w.AddDomain("acme.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.acme.test"}}, Users: []string{"ann"},
		Mailboxes: map[string]mailsim.Reply{"grey": mailsim.ReplyGreylisted}})
	w.AddDomain("nomx.test", mailsim.Domain{NullMX: true})
	env := map[string]string{
		"MAILVET_DNS_RESOLVER": w.DNSAddr(), "MAILVET_SMTP_PORT": fmt.Sprint(w.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS": mailsim.Prefix.String(),
	}
	cfg, err := config.Load(config.RoleVerifier, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	vc, err := verifyworker.EngineConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.NewObserved(vc, opsmetrics.NewVerify(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v, reg
}

// series returns the metric family name of reg, failing when it has none.
func series(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	t.Fatalf("%s not gathered", name)
	return nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// counterValue is the counter of name with exactly the labels want (0 when there is none).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		if fmt.Sprint(labels(m)) == fmt.Sprint(want) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// histogramCount is the number of observations of name with the label value.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, label, value string) uint64 {
	t.Helper()
	for _, m := range series(t, reg, name) {
		if labels(m)[label] == value {
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// Real verifications, one per outcome kind, through Verify and VerifyBatch: every finished
// result is counted by status and reason, every layer that ran is timed, and every SMTP reply is
// counted by command and class — and no label carries an address or a domain.
func TestVerifyMetricsFromRealWork(t *testing.T) {
	t.Parallel()
	v, reg := observedVerifier(t)
	ctx := context.Background()
	for _, e := range []string{"ann@acme.test", "nobody@acme.test", "not-an-address", "x@mailinator.com", "a@nomx.test", "grey@acme.test"} {
		v.Verify(ctx, e)
	}
	v.VerifyBatch(ctx, []string{"ann@acme.test", "nobody@acme.test"}, nil)

	for _, c := range []struct {
		status, reason string
		want           float64
	}{
		{"deliverable", "accepted", 2},
		{"undeliverable", "mailbox_unknown", 2},
		{"invalid", "invalid_syntax", 1},
		{"invalid", "disposable", 1},
		{"invalid", "null_mx", 1},
		{"unknown", "greylisted", 1},
	} {
		if got := counterValue(t, reg, "mailvet_verify_results_total", map[string]string{"reason": c.reason, "status": c.status}); got != c.want {
			t.Errorf("results{status=%s,reason=%s} = %v, want %v", c.status, c.reason, got, c.want)
		}
	}
	// A pending result of Local is not finished: it is not counted.
	before := len(series(t, reg, "mailvet_verify_results_total"))
	if _, final := v.Local("ann@acme.test"); final {
		t.Fatal("Local finished an address that needs the network")
	}
	if got := counterValue(t, reg, "mailvet_verify_results_total", map[string]string{"reason": "", "status": "unknown"}); got != 0 {
		t.Errorf("Local's pending result was counted")
	}
	if after := len(series(t, reg, "mailvet_verify_results_total")); after != before {
		t.Errorf("%d result series after Local, %d before", after, before)
	}

	for layer, atLeast := range map[string]uint64{"syntax": 9, "disposable": 8, "mx": 3, "smtp": 5} {
		if n := histogramCount(t, reg, "mailvet_verify_layer_duration_seconds", "layer", layer); n < atLeast {
			t.Errorf("layer %s timed %d times, want at least %d", layer, n, atLeast)
		}
	}

	for _, c := range []struct{ command, class string }{
		{"CONNECT", "2xx"}, {"EHLO", "2xx"}, {"MAIL", "2xx"}, {"RCPT", "2xx"}, {"RCPT", "5xx"}, {"RCPT", "4xx"},
	} {
		if got := counterValue(t, reg, "mailvet_smtp_replies_total", map[string]string{"class": c.class, "command": c.command}); got < 1 {
			t.Errorf("no %s reply to %s counted", c.class, c.command)
		}
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); len(v) > 0 && (containsAny(v, "@", ".test", "mailinator")) {
					t.Errorf("%s has label %s=%q: an address or a domain", f.GetName(), l.GetName(), v)
				}
			}
		}
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				return true
			}
		}
	}
	return false
}
