package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/miekg/dns"
)

// TestProbeReason maps every kind of probe answer to its reason, including those the mail world
// cannot script (a failed TLS handshake, a forbidden MX address): the errors are built the way
// the smtp package builds them.
func TestProbeReason(t *testing.T) {
	t.Parallel()
	reply := func(code int, enh, text string) smtp.Result {
		rep := smtp.Reply{Code: code, Enhanced: enh, Text: text}
		return smtp.Result{Verdict: smtp.Classify(rep).Verdict, Host: "mx.example.test", Reply: rep}
	}
	withErr := func(err error) smtp.Result { return smtp.Result{Verdict: smtp.Unknown, Err: err} }
	for _, tc := range []struct {
		name string
		pr   smtp.Result
		want verdict.Reason
	}{
		{"250", reply(250, "2.1.5", "OK"), verdict.ReasonAccepted},
		{"catch-all", smtp.Result{Verdict: smtp.CatchAll, Reply: smtp.Reply{Code: 250}}, verdict.ReasonCatchAll},
		{"550 5.1.1", reply(550, "5.1.1", "No such user"), verdict.ReasonMailboxUnknown},
		{"550 without enhanced code", reply(550, "", "User unknown"), verdict.ReasonMailboxUnknown},
		{"553 5.1.3", reply(553, "5.1.3", "Bad address"), verdict.ReasonMailboxUnknown},
		{"550 5.7.1 in no-such-user words", reply(550, "5.7.1", "No such user!"), verdict.ReasonMailboxUnknown},
		{"511 without enhanced code", reply(511, "", "sorry, no mailbox here by that name. (#5.1.1)"), verdict.ReasonMailboxUnknown},
		{"550 5.2.1 disabled", reply(550, "5.2.1", "The email account that you tried to reach is disabled."), verdict.ReasonMailboxDisabled},
		{"bare 550 administrative prohibition", reply(550, "", "Administrative prohibition"), verdict.ReasonPolicyBlocked},
		{"bare 550 without words", reply(550, "", ""), verdict.ReasonPolicyBlocked},
		{"554 banner in no-such-user words", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 554, Text: "no such user here"}, Err: fmt.Errorf("%w: banner: 554 no such user here", smtp.ErrNoHost)}, verdict.ReasonPolicyBlocked},
		{"552 5.2.2", reply(552, "5.2.2", "Mailbox full"), verdict.ReasonMailboxFull},
		{"552 without enhanced code", reply(552, "", "Quota exceeded"), verdict.ReasonMailboxFull},
		{"452 4.2.2", reply(452, "4.2.2", "Over quota"), verdict.ReasonMailboxFull},
		{"550 5.2.2", reply(550, "5.2.2", "Mailbox full"), verdict.ReasonMailboxFull},
		{"554 5.7.1", reply(554, "5.7.1", "Access denied"), verdict.ReasonPolicyBlocked},
		{"550 5.7.1", reply(550, "5.7.1", "Relay denied"), verdict.ReasonPolicyBlocked},
		{"554", reply(554, "", "Transaction failed"), verdict.ReasonPolicyBlocked},
		{"450 4.7.1 greylisted", reply(450, "4.7.1", "Greylisted, please try again later"), verdict.ReasonGreylisted},
		{"451 greylisting text", reply(451, "", "Greylisting in action"), verdict.ReasonGreylisted},
		{"451 4.7.1", reply(451, "4.7.1", "Please come back"), verdict.ReasonGreylisted},
		{"451 4.3.0", reply(451, "4.3.0", "Local error"), verdict.ReasonTemporarilyUnavail},
		{"421", reply(421, "4.3.2", "Service not available"), verdict.ReasonTemporarilyUnavail},
		{"blocked provider", smtp.Result{Verdict: smtp.Unknown, Blocked: true, Err: smtp.ErrBlocked}, verdict.ReasonProviderBlocksProbes},
		{"budget", withErr(smtp.ErrTimeout), verdict.ReasonTimeout},
		{"budget (ctx)", withErr(fmt.Errorf("%w: %v", smtp.ErrTimeout, context.DeadlineExceeded)), verdict.ReasonTimeout},
		{"sessions in use", withErr(fmt.Errorf("%w: %w", smtp.ErrBusy, smtp.ErrTimeout)), verdict.ReasonMailServerBusy},
		{"no addresses", withErr(smtp.ErrNoHost), verdict.ReasonConnectionRefused},
		{"refused", withErr(fmt.Errorf("%w: %v", smtp.ErrNoHost, errors.New("dial tcp 192.0.2.1:25: connect: connection refused"))), verdict.ReasonConnectionRefused},
		{"banner timeout", withErr(fmt.Errorf("%w: %v", smtp.ErrNoHost, errors.New("banner: read tcp: i/o timeout"))), verdict.ReasonTimeout},
		{"TLS handshake", withErr(fmt.Errorf("%w: %v", smtp.ErrNoHost, fmt.Errorf("TLS handshake: %w", io.EOF))), verdict.ReasonTLSFailed},
		{"STARTTLS refused", withErr(fmt.Errorf("STARTTLS: %s", smtp.Reply{Code: 454, Enhanced: "4.7.0", Text: "TLS not available"})), verdict.ReasonTLSFailed},
		{"sender refused at RCPT (553 5.1.8)", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 553, Enhanced: "5.1.8", Text: "<v@probe.test>: Sender address rejected: Domain not found"}}, verdict.ReasonSenderRejected},
		{"sender deferred at RCPT (450 4.1.8)", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 450, Enhanced: "4.1.8", Text: "<v@probe.test>: Sender address rejected: Domain not found"}}, verdict.ReasonTemporarilyUnavail},
		{"421 banner on the last MX", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service not available"}, Err: fmt.Errorf("%w: banner: 421 4.3.2 Service not available", smtp.ErrNoHost)}, verdict.ReasonTemporarilyUnavail},
		{"554 banner on the last MX", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 554, Enhanced: "5.7.1", Text: "Client host blocked"}, Err: fmt.Errorf("%w: banner: 554 5.7.1 Client host blocked", smtp.ErrNoHost)}, verdict.ReasonPolicyBlocked},
		{"MAIL FROM refused", withErr(fmt.Errorf("MAIL FROM: %s", smtp.Reply{Code: 554, Enhanced: "5.7.1", Text: "Sender rejected"})), verdict.ReasonSenderRejected},
		{"private MX", withErr(fmt.Errorf("%w: %w", smtp.ErrForbiddenAddress, errors.New("127.0.0.1 is loopback"))), verdict.ReasonMXPrivate},
		{"private MX after failover", withErr(fmt.Errorf("%w: %w", smtp.ErrNoHost, fmt.Errorf("%w: 10.0.0.1", smtp.ErrForbiddenAddress))), verdict.ReasonMXPrivate},
		{"catch-all inconclusive", smtp.Result{Verdict: smtp.Unknown, Reply: smtp.Reply{Code: 250}, Err: errors.New("smtp: catch-all check inconclusive")}, verdict.ReasonTemporarilyUnavail},
		{"prober closed", withErr(smtp.ErrClosed), verdict.ReasonInternal},
		{"UTF-8 local part, no SMTPUTF8", smtp.Result{Err: smtp.ErrSMTPUTF8Unsupported}, verdict.ReasonSMTPUTF8Unsupported},
		{"nothing at all", smtp.Result{}, verdict.ReasonInternal},
	} {
		if got := probeReason(tc.pr); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestClassifierMeaningsAreReasons: the classifier's meanings are passed on as reasons unchanged
// (replyReason), so each must be one of verdict.Reasons.
func TestClassifierMeaningsAreReasons(t *testing.T) {
	t.Parallel()
	listed := map[verdict.Reason]bool{}
	for _, r := range verdict.Reasons {
		listed[r] = true
	}
	for _, m := range smtp.Meanings {
		if !listed[verdict.Reason(m)] {
			t.Errorf("the classifier's meaning %q is no reason", m)
		}
	}
}

// TestSuggestionsWithoutNoise: mailcheck "corrects" company.test to company.de; a domain that
// receives mail keeps only suggestions of a known mailbox provider, while a domain without a mail
// route (no MX, or DNS that could not tell) keeps every suggestion.
func TestSuggestionsWithoutNoise(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	b.server(t, mailsim.ServerOptions{Name: "mx.company.test"})
	b.w.AddDomain("company.test", mailsim.Domain{MX: mxOf("mx.company.test"), Users: []string{"carol"}})
	b.w.AddDomain("comcastt.net", mailsim.Domain{MX: mxOf("mx.company.test"), CatchAll: true}) // a typo squatter
	b.w.AddDomain("webb.de", mailsim.Domain{MX: mxOf("mx.company.test"), Users: []string{"carol"}})
	b.w.AddDomain("broken.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	for _, tc := range []struct {
		addr   string
		status verdict.Status
		want   string // "" for none
	}{
		{"carol@company.test", verdict.StatusDeliverable, ""},       // confirmed mailbox: no company.de
		{"dave@company.test", verdict.StatusUndeliverable, ""},      // the domain receives mail: still no TLD swap
		{"ann@comcastt.net", verdict.StatusCatchAll, "comcast.net"}, // a near miss of a provider, with MX
		{"carol@webb.de", verdict.StatusDeliverable, "web.de"},      // the same, with a mailbox
		{"ann@gmail.cm", verdict.StatusInvalid, "gmail.com"},        // no MX
	} {
		r := b.v.Verify(context.Background(), tc.addr)
		got := ""
		if r.Suggestion != nil {
			got = *r.Suggestion
		}
		if r.Status != tc.status || got != tc.want {
			t.Errorf("%s: status %s, suggestion %q; want %s, %q", tc.addr, r.Status, got, tc.status, tc.want)
		}
	}
	// A DNS failure says nothing about the domain: its suggestion stays.
	if r := b.v.Verify(context.Background(), "ann@broken.test"); r.Status != verdict.StatusUnknown || r.Suggestion == nil || *r.Suggestion != "broken.de" {
		t.Errorf("DNS failure: %s", jsonOf(r))
	}
}

// TestReasonsDocumented keeps Reasons, the reason enums of internal/api/openapi.json and the
// table of docs/api.md, "Reasons", the same lists.
func TestReasonsDocumented(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, r := range verdict.Reasons {
		want[string(r)] = true
	}
	same := func(where string, got []string) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range got {
			seen[r] = true
			if !want[r] {
				t.Errorf("%s lists %q, which is no reason", where, r)
			}
		}
		for r := range want {
			if !seen[r] {
				t.Errorf("%s does not list %q", where, r)
			}
		}
	}

	spec, err := os.ReadFile("../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(spec, &doc); err != nil {
		t.Fatal(err)
	}
	enums := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["reason"].(map[string]any); ok {
				if list, ok := r["enum"].([]any); ok {
					var got []string
					for _, x := range list {
						got = append(got, x.(string))
					}
					enums++
					same("openapi.json", got)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if enums == 0 {
		t.Error("openapi.json has no reason enum")
	}

	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(md), "### Reasons\n")
	if !ok {
		t.Fatal(`docs/api.md has no "Reasons" section`)
	}
	table, _, _ = strings.Cut(table, "\n### ")
	var rows []string
	for _, l := range strings.Split(table, "\n") {
		if name, ok := strings.CutPrefix(l, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows = append(rows, name)
		}
	}
	same("docs/api.md", rows)
}
