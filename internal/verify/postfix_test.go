package verify

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// blockedClient is the client address scripts/postfix-bench.sh's Postfix refuses as a host.
var blockedClient = netip.MustParseAddr("127.0.0.252")

// TestPostfixVerdicts verifies addresses whose replies a real Postfix 3.7 writes in its own words
// (its mailbox table, its relay check, its access tables' actions, a client refused as a host)
// and checks each verdict and the reply it was decided on. mailsim's dialects are built from
// servers' published texts (docs/architecture.md, "Reading replies"); this reads the real thing.
// scripts/postfix-bench.sh (make bench-postfix) starts the Postfix and runs it; without it the
// test is skipped.
func TestPostfixVerdicts(t *testing.T) {
	target := os.Getenv("MAILVET_BENCH_POSTFIX")
	if target == "" {
		t.Skip("needs a Postfix: run scripts/postfix-bench.sh (make bench-postfix)")
	}
	w, err := mailsim.Start(mailsim.Options{}) // its DNS only: Postfix answers SMTP
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	// Two ways in, on the same port so that one Verifier reaches both: as an ordinary client,
	// and as the client Postfix's client_access table refuses.
	line := startDelayLine(t, netip.AddrPortFrom(postfixClient, 0), target, 0)
	startDelayLine(t, netip.AddrPortFrom(blockedClient, uint16(line.port())), target, 0)

	w.AddHost("mx.postfix.test", postfixClient)
	w.AddHost("mx.blocked.test", blockedClient)
	w.AddDomain("oracle00.test", mailsim.Domain{MX: mxOf("mx.postfix.test")})
	w.AddDomain("elsewhere.test", mailsim.Domain{MX: mxOf("mx.postfix.test")}) // not one of Postfix's
	w.AddDomain("oracle01.test", mailsim.Domain{MX: mxOf("mx.blocked.test")})

	v, err := New(Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: line.port(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 5 * time.Second, MaxPerHost: 4, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	cases := []struct {
		email    string
		status   verdict.Status
		reason   verdict.Reason
		code     int    // of the reply it was decided on
		enhanced string // its enhanced code
	}{
		{"user00@oracle00.test", verdict.StatusDeliverable, verdict.ReasonAccepted, 250, "2.1.5"},
		// 550 5.1.1 <…>: Recipient address rejected: User unknown in virtual mailbox table
		{"user01@oracle00.test", verdict.StatusUndeliverable, verdict.ReasonMailboxUnknown, 550, "5.1.1"},
		{"full00@oracle00.test", verdict.StatusUnknown, verdict.ReasonMailboxFull, 452, "4.2.2"},
		{"gone00@oracle00.test", verdict.StatusUndeliverable, verdict.ReasonMailboxDisabled, 550, "5.2.1"},
		// 554 5.7.1 <…>: Recipient address rejected: Access denied — a rule, not the mailbox
		{"deny00@oracle00.test", verdict.StatusUnknown, verdict.ReasonPolicyBlocked, 554, "5.7.1"},
		// 450 4.7.1 <…>: Recipient address rejected: Access denied — a deferral in greylisting's
		// code (450/451 with 4.7.x): come back later, which an async job does
		{"later00@oracle00.test", verdict.StatusUnknown, verdict.ReasonGreylisted, 450, "4.7.1"},
		// 454 4.7.1 <…>: Relay access denied — Postfix is not this domain's server
		{"ann@elsewhere.test", verdict.StatusUnknown, verdict.ReasonTemporarilyUnavail, 454, "4.7.1"},
		// 554 5.7.1 <unknown[127.0.0.252]>: Client host rejected: Access denied — us, not the mailbox
		{"user00@oracle01.test", verdict.StatusUnknown, verdict.ReasonPolicyBlocked, 554, "5.7.1"},
		{"user01@oracle01.test", verdict.StatusUnknown, verdict.ReasonPolicyBlocked, 554, "5.7.1"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r := v.Verify(ctx, c.email)
		cancel()
		got, enhanced := "no reply", ""
		if rep := r.SMTPReply; rep != nil {
			if rep.EnhancedCode != nil {
				enhanced = *rep.EnhancedCode
			}
			got = fmt.Sprintf("%d %s %s", rep.Code, enhanced, rep.Text)
		}
		t.Logf("%-24s %s/%s on %s", c.email, r.Status, r.Reason, got)
		if r.Status != c.status || r.Reason != c.reason {
			t.Errorf("%s: %s/%s, want %s/%s (reply %s)", c.email, r.Status, r.Reason, c.status, c.reason, got)
		}
		if r.SMTPReply == nil || r.SMTPReply.Code != c.code || enhanced != c.enhanced {
			t.Errorf("%s: decided on %s, want a %d %s reply", c.email, got, c.code, c.enhanced)
		}
	}
}
