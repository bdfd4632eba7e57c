package verifyworker_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// The scaling world (BENCHMARKS.md, "Fleet scaling (issue 16)"): network-bound, so that a
// worker's own concurrency, not the 2 cores, limits it. 40 MX addresses, 3 domains each, 50 ms
// of round trip on every DNS answer and SMTP reply; one address in six is an unknown mailbox.
const (
	scaleServers     = 40
	scaleDomainsPer  = 3
	scaleRTT         = 50 * time.Millisecond
	scaleAddresses   = 720 // measured, after a warm-up of one address per domain
	scaleConcurrency = 8   // Options.Concurrency of every worker: what limits one worker
)

// BenchmarkFleetScaling verifies the same load through one verifier worker and through three
// (each with its own NATS connection, fleet handle and engine, as separate processes would), and
// reports addresses per second for each and their ratio, from the same run. Each configuration
// gets a fresh NATS server, so the three workers inherit nothing from the one; each warms up on
// one address per domain (MX and catch-all answers, open sessions) before the measured load.
func BenchmarkFleetScaling(b *testing.B) {
	w, err := mailsim.Start(mailsim.Options{RTT: scaleRTT})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var domains []string
	for s := range scaleServers {
		host := fmt.Sprintf("mx%d.scale.test", s)
		if _, err := w.AddServer(mailsim.ServerOptions{Name: host}); err != nil {
			b.Fatal(err)
		}
		for d := range scaleDomainsPer {
			dom := fmt.Sprintf("d%d-%d.scale.test", s, d)
			var users []string
			for u := range 100 {
				users = append(users, fmt.Sprintf("u%d", u))
			}
			w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: host}}, Users: users})
			domains = append(domains, dom)
		}
	}
	warm := make([]string, len(domains))
	for i, d := range domains {
		warm[i] = "u99@" + d
	}
	load := make([]string, scaleAddresses)
	for i := range load {
		u := i / len(domains)
		if i%6 == 5 {
			u += 1000 // not a user
		}
		load[i] = fmt.Sprintf("u%d@%s", u, domains[i%len(domains)])
	}

	var one, three []float64
	for b.Loop() {
		one = append(one, scaleRun(b, w, 1, warm, load))
		three = append(three, scaleRun(b, w, 3, warm, load))
	}
	b.ReportMetric(median(one), "addr/s-1-worker")
	b.ReportMetric(median(three), "addr/s-3-workers")
	ratios := make([]float64, len(one))
	for i := range one {
		ratios[i] = three[i] / one[i]
		b.Logf("run %d: one worker %.1f addr/s, three workers %.1f addr/s, ratio %.2f", i+1, one[i], three[i], ratios[i])
	}
	b.ReportMetric(median(ratios), "ratio")
}

// scaleRun starts n workers on a fresh NATS server, warms them up, and returns the measured
// load's addresses per second.
func scaleRun(b *testing.B, w *mailsim.World, n int, warm, load []string) float64 {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	srv := natstest.Server(b)
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	log := app.NewLogger(io.Discard, "bench")
	nc, err := queue.Connect(srv.ClientURL(), "bench-api", queue.Auth{}, log)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	layout := queue.Layout{}
	if err := queue.EnsureStreams(ctx, js, layout, nil); err != nil {
		b.Fatal(err)
	}
	d := queue.NewDispatcher(nc, js, layout)
	defer d.Close()

	var stops []func()
	defer func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
	}()
	for range n {
		wnc, err := queue.Connect(srv.ClientURL(), "bench-verifier", queue.Auth{}, log)
		if err != nil {
			b.Fatal(err)
		}
		wjs, _ := jetstream.New(wnc)
		fl, err := fleet.New(ctx, wjs, layout, fleet.Options{Log: log})
		if err != nil {
			b.Fatal(err)
		}
		v, err := verify.New(verify.Config{
			MX: mx.Config{Server: w.DNSAddr()},
			SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
				Timeout: 1500 * time.Millisecond, MaxPerHost: 20, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
		})
		if err != nil {
			b.Fatal(err)
		}
		v.Join(verify.Fleet{Slots: fl.Slots, MX: fl.MX, CatchAll: fl.CatchAll})
		wk := verifyworker.New(wnc, wjs, v, log, nil, verifyworker.Options{Concurrency: scaleConcurrency, Layout: layout})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = wk.Run(ctx)
		}()
		stops = append(stops, func() {
			<-done
			v.Close()
			fl.Close()
			wnc.Close()
		})
	}

	verifyAll := func(emails []string) time.Duration {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer rcancel()
		start := time.Now()
		missing, err := d.VerifyMany(rctx, emails, func(i int, r verdict.Result) {
			want := verdict.StatusDeliverable
			var u int
			fmt.Sscanf(emails[i], "u%d@", &u)
			if u >= 1000 {
				want = verdict.StatusUndeliverable
			}
			if r.Status != want {
				b.Errorf("%s: %s (%s), want %s", emails[i], r.Status, r.Reason, want)
			}
		})
		if err != nil || len(missing) > 0 {
			b.Fatalf("%d of %d missing: %v", len(missing), len(emails), err)
		}
		return time.Since(start)
	}
	verifyAll(warm)
	b.StartTimer()
	took := verifyAll(load)
	b.StopTimer()
	return float64(len(load)) / took.Seconds()
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
