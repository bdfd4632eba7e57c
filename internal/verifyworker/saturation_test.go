package verifyworker_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// slowMailWorld is a mail world on loopback whose one server takes rcptDelay to answer each RCPT,
// with the mailboxes users at domain, and a new verification engine for it per call of engine.
func slowMailWorld(t *testing.T, domain string, users []string, rcptDelay time.Duration) (*mailsim.World, func() *verify.Verifier) {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if _, err := w.AddServer(mailsim.ServerOptions{Name: "mx." + domain}); err != nil {
		t.Fatal(err)
	}
	w.AddDomain(domain, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx." + domain}}, Users: users, RcptDelay: rcptDelay})
	return w, func() *verify.Verifier {
		engine, err := verify.New(verify.Config{
			MX: mx.Config{Server: w.DNSAddr()},
			SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
				Timeout: 5 * time.Second, MaxPerHost: 4, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(engine.Close)
		return engine
	}
}

// A batch larger than the fleet's slots, against a slow mail server, keeps its items waiting in
// the workers (and in the stream) for longer than ItemAckWait. Every address must still be asked
// about exactly once at the customer's mail server (docs/reliability.md, "Batch and stream
// items"): a second RCPT is a second probe of the same mailbox for one request.
func TestSaturatedBatchProbesEachAddressOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		workers     int
		concurrency int
		addresses   int
	}{{"one worker", 1, 1, 10}, {"two workers", 2, 1, 10}, {"groups of two", 1, 8, 40}, {"two workers, groups of two", 2, 8, 60}, {"room for all", 1, 64, 10}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const domain = "slow.test"
			var users, emails []string
			for i := range tc.addresses {
				u := fmt.Sprintf("user%02d", i)
				users = append(users, u)
				emails = append(emails, u+"@"+domain)
			}
			world, engine := slowMailWorld(t, domain, users, 250*time.Millisecond)
			b := setup(t)
			ackWait := 600 * time.Millisecond
			for range tc.workers {
				b.startWorker(t, engine(), verifyworker.Options{Concurrency: tc.concurrency, ItemAckWait: ackWait})
			}
			world.ResetStats() // the warm-up's probes are not the batch's

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			answered := make([]int, len(emails))
			missing, err := b.dispatcher.VerifyMany(ctx, emails, func(i int, r verdict.Result) {
				answered[i]++
				if r.Status != verdict.StatusDeliverable {
					t.Errorf("%s: %s", emails[i], r.Status)
				}
			})
			if err != nil || len(missing) > 0 {
				t.Fatalf("missing %v, err %v", missing, err)
			}
			// Copies redelivered late are probed after the answer; give them the time to show.
			time.Sleep(3 * ackWait)
			for i, e := range emails {
				if n := world.RcptsTo(e); n != 1 || answered[i] != 1 {
					t.Errorf("%s: %d RCPTs at the mail server, %d answers; want 1 and 1", e, n, answered[i])
				}
			}
		})
	}
}

// A caller that gives up (its client went away, or its deadline passed with items still queued
// behind a slow mail server) has its answer; the items it did not get must not be probed
// afterwards, neither those still in the stream nor those already waiting in a worker for a slot
// (docs/reliability.md, "Batch and stream items").
func TestAbandonedBatchIsNotProbedFurther(t *testing.T) {
	t.Parallel()
	const domain = "slow.test"
	var users, emails []string
	for i := range 12 {
		u := fmt.Sprintf("user%02d", i)
		users = append(users, u)
		emails = append(emails, u+"@"+domain)
	}
	world, engine := slowMailWorld(t, domain, users, 250*time.Millisecond)
	b := setup(t)
	b.startWorker(t, engine(), verifyworker.Options{Concurrency: 1, ItemAckWait: time.Second})
	world.ResetStats()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var answered atomic.Int64
	missing, err := b.dispatcher.VerifyMany(ctx, emails, func(int, verdict.Result) {
		if answered.Add(1) == 2 {
			cancel() // the client goes away after its second result
		}
	})
	if err == nil || len(missing) == 0 {
		t.Fatalf("missing %v, err %v: the batch was to end early", missing, err)
	}
	gaveUp := int64(len(emails) - len(missing))
	time.Sleep(3 * time.Second) // what was left would have been probed by now, 250 ms each
	probed := int64(0)
	for _, e := range emails {
		probed += min(1, world.RcptsTo(e))
	}
	// The one being probed when the caller gave up finishes; nothing after it starts.
	if probed > gaveUp+1 {
		t.Fatalf("%d of %d addresses probed after the caller gave up with %d answers", probed, len(emails), gaveUp)
	}
}
