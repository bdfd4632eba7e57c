package verify

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/signals"
	"github.com/miekg/dns"
)

// stepCase is one outcome of the pipeline, with what the result must say.
type stepCase struct {
	name, addr string
	status     verdict.Status
	confidence float64
	failed     verdict.Check // "" for null
	local      bool          // the local layers decide it: Local's result is final
	reason     verdict.Reason
}

// stepWorld scripts a mail world with one address for every outcome the pipeline can reach.
func stepWorld(t *testing.T) (*testBundle, []stepCase) {
	t.Helper()
	b := setup(t, 0, 4)
	b.server(t, mailsim.ServerOptions{Name: "mx.acme.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.google.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.refused.test", Refuse: true})
	b.server(t, mailsim.ServerOptions{Name: "mx.strict.test", MailReply: &mailsim.Reply{Code: 554, Enhanced: "5.7.1", Text: "Sender address rejected: not accepted"}})
	implicitMX := b.server(t, mailsim.ServerOptions{Name: "host.implicit.test"})
	b.w.AddDomain("acme.test", mailsim.Domain{MX: mxOf("mx.acme.test"), Users: []string{"ann", "info"},
		Mailboxes: map[string]mailsim.Reply{
			"grey":   mailsim.ReplyGreylisted,
			"policy": mailsim.ReplyPolicy,
			"full":   {Code: 552, Enhanced: "5.2.2", Text: "Mailbox full"},
			"busy":   {Code: 451, Enhanced: "4.3.0", Text: "Local error in processing"},
		}})
	b.w.AddDomain("catchall.test", mailsim.Domain{MX: mxOf("mx.acme.test"), CatchAll: true})
	b.w.AddDomain("proton.me", mailsim.Domain{MX: mxOf("mx.acme.test"), Users: []string{"ann"}})
	b.w.AddDomain("gmail.com", mailsim.Domain{MX: mxOf("mx.google.test"), CatchAll: true})
	b.w.AddDomain("nomx.test", mailsim.Domain{})
	b.w.AddDomain("nullmx.test", mailsim.Domain{NullMX: true, A: []string{implicitMX.Addr().String()}})
	b.w.AddDomain("implicit.test", mailsim.Domain{A: []string{implicitMX.Addr().String()}, Users: []string{"ann"}})
	b.w.AddDomain("servfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	// MX records whose host does not exist: mail to the domain bounces (RFC 5321 §5.1).
	b.w.AddDomain("deadmx.test", mailsim.Domain{MX: mxOf("mx.gone.test")})
	b.w.AddDomain("refused.test", mailsim.Domain{MX: mxOf("mx.refused.test")})
	b.w.AddDomain("strict.test", mailsim.Domain{MX: mxOf("mx.strict.test"), Users: []string{"ann"}})
	return b, []stepCase{
		{"not an address", "not an address", verdict.StatusInvalid, 0, verdict.CheckSyntax, true, verdict.ReasonInvalidSyntax},
		{"invalid syntax", "ann..x@acme.test", verdict.StatusInvalid, 0, verdict.CheckSyntax, true, verdict.ReasonInvalidSyntax},
		{"disposable role", "info@mailinator.com", verdict.StatusInvalid, 0, verdict.CheckDisposable, true, verdict.ReasonDisposable},
		{"no MX", "ann@nomx.test", verdict.StatusInvalid, 0, verdict.CheckNoMX, false, verdict.ReasonNoMX},
		{"no MX, typo suggestion", "ann@gmail.cm", verdict.StatusInvalid, 0, verdict.CheckNoMX, false, verdict.ReasonNoMX},
		{"null MX", "ann@nullmx.test", verdict.StatusInvalid, 0, verdict.CheckNoMX, false, verdict.ReasonNullMX},
		{"MX hosts without addresses", "ann@deadmx.test", verdict.StatusInvalid, 0, verdict.CheckNoMX, false, verdict.ReasonNoMX},
		{"implicit MX", "ann@implicit.test", verdict.StatusDeliverable, 0.95, "", false, verdict.ReasonAccepted},
		{"DNS failure", "ann@servfail.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonDNSError},
		{"deliverable", "Ann@acme.test", verdict.StatusDeliverable, 0.95, "", false, verdict.ReasonAccepted},
		{"deliverable role", "info@acme.test", verdict.StatusDeliverable, 0.90, "", false, verdict.ReasonAccepted},
		{"deliverable free provider", "ann@proton.me", verdict.StatusDeliverable, 0.95, "", false, verdict.ReasonAccepted},
		{"undeliverable", "bob@acme.test", verdict.StatusUndeliverable, 0.02, verdict.CheckSMTP, false, verdict.ReasonMailboxUnknown},
		{"mailbox full", "full@acme.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonMailboxFull},
		{"greylisted", "grey@acme.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonGreylisted},
		{"policy block", "policy@acme.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonPolicyBlocked},
		{"other 4xx", "busy@acme.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonTemporarilyUnavail},
		{"sender rejected", "ann@strict.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonSenderRejected},
		{"connection refused", "ann@refused.test", verdict.StatusUnknown, 0.50, "", false, verdict.ReasonConnectionRefused},
		{"catch-all", "whoever@catchall.test", verdict.StatusCatchAll, 0.60, "", false, verdict.ReasonCatchAll},
		{"blocked provider", "ann@gmail.com", verdict.StatusUnknown, 0.75, "", false, verdict.ReasonProviderBlocksProbes},
	}
}

// sansLatency is r without latency_ms, the one field that may differ between the entry points.
func sansLatency(r verdict.Result) verdict.Result {
	r.LatencyMS = 0
	return r
}

func jsonOf(r verdict.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// TestOneStepPerAddress shows that Local, Verify and VerifyBatch decide every address with the
// same per-address step, for every outcome: Verify's result, VerifyBatch's returned result and
// the result VerifyBatch streams through each are equal field by field (latency_ms aside), and
// Local's result is the same for the addresses the local layers decide. Verify and VerifyBatch
// run on separate Verifiers, so that neither answers from caches or sessions the other filled.
//
// The second half installs the step's test hook, which stands in for a new layer writing a field
// into the result: what it writes reaches all three entry points (and so the single, batch and
// stream answers of the API, which are built from them) without an edit to any of them, and it
// runs exactly once per address and call — VerifyBatch does not decide one address of a domain
// and copy the verdict to the others.
func TestOneStepPerAddress(t *testing.T) {
	t.Parallel()
	b, cases := stepWorld(t)
	single := b.v
	batch := newVerifier(t, b.w, 4)
	t.Cleanup(batch.Close)
	raws := make([]string, len(cases))
	for i, c := range cases {
		raws[i] = c.addr
	}
	ctx := context.Background()

	// run verifies raws through every entry point and checks that they agree.
	run := func(t *testing.T) []verdict.Result {
		t.Helper()
		streamed := make([]verdict.Result, len(raws))
		calls := make([]int, len(raws))
		got := batch.VerifyBatch(ctx, raws, func(i int, r verdict.Result) { streamed[i] = r; calls[i]++ })
		verified := make([]verdict.Result, len(raws))
		for i, c := range cases {
			one := single.Verify(ctx, c.addr)
			verified[i] = one
			if calls[i] != 1 {
				t.Errorf("%s: each called %d times, want 1", c.name, calls[i])
			}
			if !reflect.DeepEqual(sansLatency(one), sansLatency(got[i])) {
				t.Errorf("%s: Verify and VerifyBatch differ:\n  Verify      %s\n  VerifyBatch %s", c.name, jsonOf(one), jsonOf(got[i]))
			}
			if !reflect.DeepEqual(got[i], streamed[i]) {
				t.Errorf("%s: VerifyBatch returned and streamed differ:\n  returned %s\n  streamed %s", c.name, jsonOf(got[i]), jsonOf(streamed[i]))
			}
			failed := verdict.Check("")
			if one.FailedCheck != nil {
				failed = *one.FailedCheck
			}
			if one.Status != c.status || one.Confidence != c.confidence || failed != c.failed || one.Reason != c.reason {
				t.Errorf("%s: %s, want status %s, confidence %v, failed_check %q, reason %q", c.name, jsonOf(one), c.status, c.confidence, c.failed, c.reason)
			}

			local, final := single.Local(c.addr)
			if final != c.local {
				t.Errorf("%s: Local final = %v, want %v", c.name, final, c.local)
			}
			if final {
				if !reflect.DeepEqual(sansLatency(local), sansLatency(one)) {
					t.Errorf("%s: Local and Verify differ:\n  Local  %s\n  Verify %s", c.name, jsonOf(local), jsonOf(one))
				}
				continue
			}
			// A pending result has the signals every later answer has, and "unknown" until the
			// network layers decide. Its suggestion is mailcheck's: whether the domain receives
			// mail, which may silence it, is not known yet.
			want := verdict.Result{Email: one.Email, Role: one.Role, FreeProvider: one.FreeProvider}
			s := signals.Suggest(one.Email[strings.LastIndexByte(one.Email, '@')+1:])
			if single.finished != nil {
				s = "step:" + one.Email + "|" + s // the second half's mark
			}
			if s != "" {
				want.Suggestion = &s
			}
			want.Apply(verdict.OutcomeUnknown)
			if !reflect.DeepEqual(sansLatency(local), want) {
				t.Errorf("%s: Local = %s, want the pending %s", c.name, jsonOf(local), jsonOf(want))
			}
		}
		return verified
	}

	var plain []verdict.Result
	t.Run("results agree", func(t *testing.T) {
		plain = run(t)
		// The cases exercise the signals too, or their agreement would prove little.
		at := func(name string) verdict.Result {
			for i, c := range cases {
				if c.name == name {
					return plain[i]
				}
			}
			t.Fatalf("no case %q", name)
			return verdict.Result{}
		}
		if r := at("disposable role"); !r.Role || !r.Disposable {
			t.Errorf("disposable role: %s", jsonOf(r))
		}
		if r := at("no MX, typo suggestion"); r.Suggestion == nil || *r.Suggestion != "gmail.com" {
			t.Errorf("typo: %s", jsonOf(r))
		}
		if r := at("deliverable free provider"); !r.FreeProvider {
			t.Errorf("free provider: %s", jsonOf(r))
		}
		if r := at("blocked provider"); !r.SMTPBlocked || !r.FreeProvider || !r.MXFound {
			t.Errorf("blocked provider: %s", jsonOf(r))
		}
		// An implicit MX is reported as a mail route: mx_found, with the domain as mx_host.
		if r := at("implicit MX"); !r.MXFound || r.MXHost == nil || *r.MXHost != "implicit.test" {
			t.Errorf("implicit MX: %s", jsonOf(r))
		}
		// mailcheck would "correct" every .test domain to .de; a domain that receives mail
		// keeps no such TLD swap.
		for _, name := range []string{"deliverable", "catch-all", "implicit MX", "undeliverable"} {
			if r := at(name); r.Suggestion != nil {
				t.Errorf("%s: suggestion %q for a domain that receives mail", name, *r.Suggestion)
			}
		}
		for i, r := range plain {
			if r.Reason == "" {
				t.Errorf("%s: no reason: %s", cases[i].name, jsonOf(r))
			}
		}
	})

	t.Run("a field set in the step reaches every entry point", func(t *testing.T) {
		var (
			mu   sync.Mutex
			seen = map[string]int{} // results the hook saw, by email
		)
		// The hook marks the result with its own email, so a verdict copied from another
		// address would show the wrong mark. Suggestion carries the mark because Result has no
		// spare field; the mark keeps the real suggestion, if any, after a "|".
		mark := func(r verdict.Result) verdict.Result {
			mu.Lock()
			seen[r.Email]++
			mu.Unlock()
			m := "step:" + r.Email + "|"
			if r.Suggestion != nil {
				m += *r.Suggestion
			}
			r.Suggestion = &m
			return r
		}
		single.finished, batch.finished = mark, mark
		t.Cleanup(func() { single.finished, batch.finished = nil, nil })

		marked := run(t)
		for i, c := range cases {
			r, p := marked[i], plain[i]
			want := "step:" + p.Email + "|"
			if p.Suggestion != nil {
				want += *p.Suggestion
			}
			if r.Suggestion == nil || *r.Suggestion != want {
				t.Errorf("%s: suggestion %v, want the mark %q", c.name, r.Suggestion, want)
			}
			// Apart from the mark, the hook changed nothing — but for the catch-all domain, which
			// the first run found to be one: this run answers it from the cache, with no RCPT
			// and so no reply to show (docs/api.md, "The verify result").
			r.Suggestion, p.Suggestion = nil, nil
			if c.status == verdict.StatusCatchAll {
				if r.SMTPReply != nil {
					t.Errorf("%s: smtp_reply %s from the catch-all cache, want null", c.name, jsonOf(r))
				}
				p.SMTPReply = nil
			}
			if !reflect.DeepEqual(sansLatency(r), sansLatency(p)) {
				t.Errorf("%s: marked %s, unmarked %s", c.name, jsonOf(r), jsonOf(p))
			}
		}
		// run made one VerifyBatch, one Verify and one Local call per address: three steps.
		for i, c := range cases {
			email := plain[i].Email
			if seen[email] != 3 {
				t.Errorf("%s: the step finished %q %d times, want 3 (batch, single, local)", c.name, email, seen[email])
			}
		}
	})
}
