package verify

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

const benchRTT = 20 * time.Millisecond

// newVerifier returns a Verifier pointed at w's DNS and SMTP servers. The caller closes it.
func newVerifier(tb testing.TB, w *mailsim.World, maxPerHost int) *Verifier {
	tb.Helper()
	v, err := New(Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 1500 * time.Millisecond, MaxPerHost: maxPerHost, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// BenchmarkVerifyFreshDomain verifies a deliverable address of a domain the Verifier has never
// seen (no MX cache, no catch-all cache, no open session), with 20 ms RTT on DNS and SMTP.
func BenchmarkVerifyFreshDomain(b *testing.B) {
	tb := setup(b, benchRTT, 20)
	tb.server(b, mailsim.ServerOptions{Name: "mx.fresh.test"})
	var dnsQ, smtpRT, sessions int64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		dom := fmt.Sprintf("fresh%d.test", i)
		tb.w.AddDomain(dom, mailsim.Domain{MX: mxOf("mx.fresh.test"), Users: []string{"ann"}})
		v := newVerifier(b, tb.w, 20)
		q0 := tb.w.DNSStats().Queries
		b.StartTimer()
		r := v.Verify(context.Background(), "ann@"+dom)
		b.StopTimer()
		if r.Status != verdict.StatusDeliverable {
			b.Fatalf("%+v", r)
		}
		dnsQ += tb.w.DNSStats().Queries - q0
		st := v.ProbeStats()
		smtpRT += st.RoundTrips
		sessions += st.Sessions
		v.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(dnsQ)/float64(b.N), "dns-rtt/op")
	b.ReportMetric(float64(smtpRT)/float64(b.N), "smtp-rtt/op")
	b.ReportMetric(float64(sessions)/float64(b.N), "sessions/op")
}

// BenchmarkVerifyCachedDomain verifies further addresses of a domain whose MX and catch-all
// answers are cached, on the session the first address left open.
func BenchmarkVerifyCachedDomain(b *testing.B) {
	tb := setup(b, benchRTT, 20)
	tb.server(b, mailsim.ServerOptions{Name: "mx.cached.test"})
	tb.w.AddDomain("cached.test", mailsim.Domain{MX: mxOf("mx.cached.test"), Users: []string{"ann", "bob"}})
	v := tb.v
	if r := v.Verify(context.Background(), "ann@cached.test"); r.Status != verdict.StatusDeliverable {
		b.Fatalf("%+v", r)
	}
	before, q0 := v.ProbeStats(), tb.w.DNSStats().Queries
	for b.Loop() {
		if r := v.Verify(context.Background(), "bob@cached.test"); r.Status != verdict.StatusDeliverable {
			b.Fatalf("%+v", r)
		}
	}
	after := v.ProbeStats()
	b.ReportMetric(float64(tb.w.DNSStats().Queries-q0)/float64(b.N), "dns-rtt/op")
	b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/float64(b.N), "smtp-rtt/op")
	b.ReportMetric(float64(after.Sessions-before.Sessions)/float64(b.N), "new-sessions/op")
}

// BenchmarkVerifyBatch is the batch of BENCHMARKS.md: 1,000 addresses, 50 on each of 20 domains
// that share one MX address, half of them non-existent, 20 ms RTT, at most 40 sessions, and a
// server that throttles after 10 rejected recipients per session. Every verdict is checked.
func BenchmarkVerifyBatch(b *testing.B) {
	tb := setup(b, benchRTT, 40)
	srv := tb.server(b, mailsim.ServerOptions{Name: "mx.shared.test", ThrottleAfter: 10, ThrottleDelay: time.Second})
	var raws []string
	var want []verdict.Status
	for d := range 20 {
		dom := fmt.Sprintf("shared%02d.test", d)
		var users []string
		for u := range 50 {
			local := fmt.Sprintf("user%02d", u)
			raws = append(raws, local+"@"+dom)
			if u%2 == 0 {
				users = append(users, local)
				want = append(want, verdict.StatusDeliverable)
			} else {
				want = append(want, verdict.StatusUndeliverable)
			}
		}
		tb.w.AddDomain(dom, mailsim.Domain{MX: mxOf("mx.shared.test"), Users: users})
	}
	var sessions, rtts, serverRTs, peak, throttled int64
	for b.Loop() {
		b.StopTimer()
		v := newVerifier(b, tb.w, 40) // fresh caches and no open sessions every time
		srv.ResetStats()
		b.StartTimer()
		res := v.VerifyBatch(context.Background(), raws, nil)
		b.StopTimer()
		for i, r := range res {
			if r.Status != want[i] {
				b.Fatalf("%s: %s, want %s", raws[i], r.Status, want[i])
			}
		}
		st, ss := v.ProbeStats(), srv.Stats()
		sessions += st.Sessions
		rtts += st.RoundTrips
		serverRTs += ss.RoundTrips
		peak = max(peak, ss.PeakConcurrent)
		throttled += ss.Throttled
		v.Close()
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(sessions)/n, "sessions/op")
	b.ReportMetric(float64(rtts)/n, "client-rtt/op")
	b.ReportMetric(float64(serverRTs)/n, "server-rtt/op")
	b.ReportMetric(float64(peak), "peak-sessions")
	b.ReportMetric(float64(throttled)/n, "throttled/op")
}

// BenchmarkLocal is Verifier.Local for the address of BenchmarkLocalLayers
// (internal/verify/signals): layers 1 and 2 and the signals, as the API runs them for every
// address, plus the Result the API answers with and its latency_ms. No list holds the domain,
// so Suggest runs its slow case and the address is not final.
func BenchmarkLocal(b *testing.B) {
	tb := setup(b, 0, 20)
	b.ReportAllocs()
	for b.Loop() {
		if r, final := tb.v.Local("Jane.Doe+news@example-corp.com"); final || r.Status != verdict.StatusUnknown {
			b.Fatalf("%+v, final %v", r, final)
		}
	}
}

// BenchmarkLocalFinal is Verifier.Local for an address the local layers decide (disposable, and
// a role address): the answer the API gives without asking a worker.
func BenchmarkLocalFinal(b *testing.B) {
	tb := setup(b, 0, 20)
	b.ReportAllocs()
	for b.Loop() {
		if r, final := tb.v.Local("info@mailinator.com"); !final || !r.Disposable {
			b.Fatalf("%+v, final %v", r, final)
		}
	}
}
