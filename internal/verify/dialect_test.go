package verify

import (
	"context"
	"github.com/mailvet/mailvet/internal/verdict"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// TestIssue30Dialects goes through the three misreadings of real servers' replies, end to end
// (DNS, the prober's sessions, the catch-all probe, the reasons): a mailbox that does not exist
// said under a policy code, a qmail 511, and a gateway refusing us under a bare 550.
func TestIssue30Dialects(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 4)
	b.server(t, mailsim.ServerOptions{Name: "mx.filtered.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.qmail.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.gateway.test"})
	b.w.AddDomain("filtered.test", mailsim.Domain{MX: mxOf("mx.filtered.test"), Users: []string{"ann"}, Dialect: &mailsim.PolicyCodeUnknownUser})
	b.w.AddDomain("qmail.test", mailsim.Domain{MX: mxOf("mx.qmail.test"), Users: []string{"ann"}, Dialect: &mailsim.Qmail})
	b.w.AddDomain("gateway.test", mailsim.Domain{MX: mxOf("mx.gateway.test"), Users: []string{"ann"}, Dialect: &mailsim.Gateway, All: &mailsim.Gateway.Refusal})
	for _, tc := range []struct {
		name, addr string
		status     verdict.Status
		reason     verdict.Reason
	}{
		// 550 5.7.1 "…User email address is marked as invalid.": no such mailbox, whatever the code.
		{"no such user under 5.7.1", "bob@filtered.test", verdict.StatusUndeliverable, verdict.ReasonMailboxUnknown},
		// The catch-all probe got the same refusal: the domain is not catch-all.
		{"real mailbox beside it", "ann@filtered.test", verdict.StatusDeliverable, verdict.ReasonAccepted},
		{"qmail 511", "bob@qmail.test", verdict.StatusUndeliverable, verdict.ReasonMailboxUnknown},
		{"real mailbox on qmail", "ann@qmail.test", verdict.StatusDeliverable, verdict.ReasonAccepted},
		// 550 "Administrative prohibition envelope blocked": a refusal of us, not of the mailbox.
		{"gateway refusal under a bare 550", "ann@gateway.test", verdict.StatusUnknown, verdict.ReasonPolicyBlocked},
	} {
		r := b.v.Verify(context.Background(), tc.addr)
		if r.Status != tc.status || r.Reason != tc.reason {
			t.Errorf("%s: %s: %s/%s, want %s/%s", tc.name, tc.addr, r.Status, r.Reason, tc.status, tc.reason)
		}
	}
}

// TestEveryDialect verifies, for every dialect mailsim speaks, an address that exists, one that
// does not, a disabled and a full mailbox where the dialect has words for them, a domain that
// refuses us and a server too busy to greet us: each must get the status and reason its reply
// means.
func TestEveryDialect(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 4)
	type want struct {
		addr   string
		status verdict.Status
		reason verdict.Reason
	}
	var cases []want
	for _, d := range mailsim.Dialects {
		d := d
		dom := d.Name + "-dialect.test" // "yahoo.dialect.test" would be a blocked provider
		mx := "mx." + dom
		b.server(t, mailsim.ServerOptions{Name: mx})
		boxes := map[string]mailsim.Reply{}
		if d.Disabled.Code != 0 {
			boxes["gone"] = d.Disabled
			cases = append(cases, want{"gone@" + dom, verdict.StatusUndeliverable, verdict.ReasonMailboxDisabled})
		}
		if d.Full.Code != 0 {
			boxes["full"] = d.Full
			cases = append(cases, want{"full@" + dom, verdict.StatusUnknown, verdict.ReasonMailboxFull})
		}
		b.w.AddDomain(dom, mailsim.Domain{MX: mxOf(mx), Users: []string{"ann"}, Mailboxes: boxes, Dialect: &d})
		cases = append(cases,
			want{"ann@" + dom, verdict.StatusDeliverable, verdict.ReasonAccepted},
			want{"bob@" + dom, verdict.StatusUndeliverable, verdict.ReasonMailboxUnknown})

		refusing := "refusing." + dom
		b.w.AddDomain(refusing, mailsim.Domain{MX: mxOf(mx), Users: []string{"ann"}, All: &d.Refusal})
		cases = append(cases, want{"ann@" + refusing, verdict.StatusUnknown, verdict.ReasonPolicyBlocked})

		if d.Busy.Code != 0 {
			busy := "busy." + dom
			b.server(t, mailsim.ServerOptions{Name: "mx." + busy, Banner: &d.Busy})
			b.w.AddDomain(busy, mailsim.Domain{MX: mxOf("mx." + busy), Users: []string{"ann"}})
			cases = append(cases, want{"ann@" + busy, verdict.StatusUnknown, verdict.ReasonTemporarilyUnavail})
		}
	}
	for _, c := range cases {
		r := b.v.Verify(context.Background(), c.addr)
		if r.Status != c.status || r.Reason != c.reason {
			t.Errorf("%s: %s/%s, want %s/%s", c.addr, r.Status, r.Reason, c.status, c.reason)
		}
	}
}
