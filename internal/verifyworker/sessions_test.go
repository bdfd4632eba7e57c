package verifyworker

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// mailvet_smtp_sessions shows the engine's open sessions by MX address, and only the addresses
// with a session open.
func TestSessionsGauge(t *testing.T) {
	t.Parallel()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, err := w.AddServer(mailsim.ServerOptions{Name: "mx.a.test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddServer(mailsim.ServerOptions{Name: "mx.b.test"}); err != nil {
		t.Fatal(err)
	}
	w.AddDomain("a.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.a.test"}}, Users: []string{"ann"}})
	w.AddDomain("b.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.b.test"}}, Users: []string{"bob"}})
	v, err := verify.New(verify.Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 1500 * time.Millisecond, MaxPerHost: 20, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	reg := prometheus.NewRegistry()
	registerSessions(reg, v)

	if got := sessionsSeries(t, reg); len(got) != 0 {
		t.Fatalf("before any probe: %v, want no series", got)
	}
	if r := v.Verify(context.Background(), "ann@a.test"); r.Status != verdict.StatusDeliverable {
		t.Fatalf("%+v", r)
	}
	// The session stays open, idle, for the next address of its MX address.
	if got := sessionsSeries(t, reg); len(got) != 1 || got[a.Addr().String()] != 1 {
		t.Fatalf("after one probe: %v, want one session at %s", got, a.Addr())
	}
	// Once the prober closes its idle sessions, the address has no series any more.
	v.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := sessionsSeries(t, reg)
		if len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v 5s after the prober closed, want no series", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionsSeries gathers mailvet_smtp_sessions from reg: value by mx label.
func sessionsSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "mailvet_smtp_sessions" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mx" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
