package verifyworker_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// BenchmarkList100k is the bulk-list throughput target (BENCHMARKS.md, "Bulk lists"): a list of
// 100,000 addresses over 1,000 domains (100 each, half of them unknown mailboxes) behind 50 mail
// servers, 20 ms RTT on every DNS answer and SMTP reply, verified by one list runner with the
// real engine, from upload (the store's Import, as the API calls it) to completed. It reports the
// time of each phase, the rate, and the process's resident memory while the list runs, sampled
// every 250 ms (flat means the runner does not grow with the list).
func BenchmarkList100k(b *testing.B) {
	const (
		domains, perDomain, servers = 1000, 100, 50
		rtt                         = 20 * time.Millisecond
	)
	w, err := mailsim.Start(mailsim.Options{RTT: rtt})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	for s := range servers {
		if _, err := w.AddServer(mailsim.ServerOptions{Name: fmt.Sprintf("mx%d.bench.test", s)}); err != nil {
			b.Fatal(err)
		}
	}
	users := make([]string, perDomain/2)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	var file strings.Builder
	for d := range domains {
		dom := fmt.Sprintf("d%d.bench.test", d)
		w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: fmt.Sprintf("mx%d.bench.test", d%servers)}}, Users: users})
		for u := range perDomain {
			fmt.Fprintf(&file, "u%d@%s\n", u, dom)
		}
	}
	engine, err := verify.New(verify.Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 1500 * time.Millisecond, MaxPerHost: 20, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close()

	srv := natstest.Server(b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		b.Fatal(err)
	}
	pool := pgtest.New(b)
	store := list.NewStore(pool, list.Defaults())
	runner := verifyworker.NewListRunner(store, js, engine, app.NewLogger(benchLog(), "lists"))
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = runner.Run(rctx) }()

	for b.Loop() {
		acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Scale})
		pgtest.Must(b, err, "account")
		start := time.Now()
		rd, err := list.NewReader(strings.NewReader(file.String()), list.Text, "", list.Limits{MaxRows: 1_000_000, MaxLineBytes: 100 << 10})
		pgtest.Must(b, err, "reader")
		l, err := store.Import(ctx, list.Upload{AccountID: acct.ID, Tier: plan.Scale, Plan: plan.Defaults()[plan.Scale], Now: time.Now()}, rd)
		pgtest.Must(b, err, "import")
		chunks, err := store.Start(ctx, l.AccountID)
		pgtest.Must(b, err, "start")
		if err := queue.PublishChunks(ctx, js, queue.Layout{}, time.Second, chunks, nil); err != nil {
			b.Fatal(err)
		}
		uploaded := time.Since(start)
		var rss []float64
		for {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the pool is busy with the runner
			got, err := store.Get(gctx, acct.ID, l.ID)
			cancel()
			pgtest.Must(b, err, "get")
			rss = append(rss, residentMB())
			if got.State == list.Completed {
				l = got
				break
			}
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("list not done after 10 min: %d of %d", got.Verified, got.Unique)
			}
			time.Sleep(250 * time.Millisecond)
		}
		total := time.Since(start)
		byStatus := l.View("", time.Now()).Counts.ByStatus
		if l.Verified != domains*perDomain || byStatus["deliverable"] != domains*perDomain/2 || byStatus["undeliverable"] != domains*perDomain/2 {
			b.Fatalf("verified %d: %v", l.Verified, l.View("", time.Now()).Counts)
		}
		b.ReportMetric(uploaded.Seconds(), "upload-s")
		b.ReportMetric(total.Seconds(), "upload-to-completed-s")
		b.ReportMetric(float64(l.Verified)/(total-uploaded).Seconds(), "addresses/s")
		b.ReportMetric(rss[len(rss)/10], "rss-at-10%-MB")
		b.ReportMetric(rss[len(rss)/2], "rss-at-50%-MB")
		b.ReportMetric(rss[len(rss)-1], "rss-at-end-MB")
		b.ReportMetric(float64(engine.ProbeStats().Sessions), "sessions")
	}
}

// residentMB is the process's resident set size now, in MB (Linux).
func residentMB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil || runtime.GOOS != "linux" {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// benchLog is where the benchmark's runner logs: stderr with MAILVET_BENCH_LOG set.
func benchLog() io.Writer {
	if os.Getenv("MAILVET_BENCH_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}
