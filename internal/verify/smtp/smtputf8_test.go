package smtp

import (
	"context"
	"errors"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// A UTF-8 local part is asked with MAIL FROM's SMTPUTF8 parameter where EHLO offers it, and sent
// as UTF-8: mailsim refuses a UTF-8 mailbox in a transaction that did not declare SMTPUTF8
// (553 5.6.7) and knows its users by their UTF-8 names, so a deliverable verdict shows both. Where
// EHLO does not offer it the address is unknown, ErrSMTPUTF8Unsupported, without a RCPT; the
// ASCII addresses of the same batch are answered as usual on both servers.
func TestSMTPUTF8(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	modern := b.server(t, mailsim.ServerOptions{Name: "mx.modern.test"})
	old := b.server(t, mailsim.ServerOptions{Name: "mx.old.test", NoSMTPUTF8: true})
	const idn = "xn--fsqu00a.xn--4rr70v" // 例子.广告, as layer 1 gives it
	b.w.AddDomain(idn, mailsim.Domain{Users: []string{"用户", "ann", "медведь"}})
	b.w.AddDomain("old.test", mailsim.Domain{Users: []string{"用户", "ann"}})

	cases := []struct {
		addr, domain string
		on           *mailsim.Server
		verdict      Verdict
		code         int
		err          error
	}{
		{"用户@" + idn, idn, modern, Deliverable, 250, nil},
		{"ann@" + idn, idn, modern, Deliverable, 250, nil},
		{"медведь@" + idn, idn, modern, Deliverable, 250, nil},
		{"无人@" + idn, idn, modern, Undeliverable, 550, nil},
		{"用户@old.test", "old.test", old, Unknown, 0, ErrSMTPUTF8Unsupported},
		{"ann@old.test", "old.test", old, Deliverable, 250, nil},
	}
	reqs := make([]Request, len(cases))
	for i, c := range cases {
		reqs[i] = Request{Addr: c.addr, Domain: c.domain, Hosts: hosts(c.on)}
	}
	for i, r := range b.p.ProbeAll(context.Background(), reqs, nil) {
		c := cases[i]
		if r.Verdict != c.verdict || r.Reply.Code != c.code || !errors.Is(r.Err, c.err) {
			t.Errorf("%s: %v %s (%v), want %v with a %d reply (%v)", c.addr, r.Verdict, r.Reply, r.Err, c.verdict, c.code, c.err)
		}
	}
}

// An idle session whose open transaction did not declare SMTPUTF8 starts a new one (RSET, MAIL
// FROM … SMTPUTF8) for a UTF-8 address, rather than naming it where the server must refuse it.
func TestSMTPUTF8AfterAnASCIITransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.modern.test"})
	b.w.AddDomain("acme.test", mailsim.Domain{Users: []string{"ann", "jöhn"}})
	ctx := context.Background()
	for _, addr := range []string{"ann@acme.test", "jöhn@acme.test", "ann@acme.test"} {
		r := b.p.Probe(ctx, Request{Addr: addr, Domain: "acme.test", Hosts: hosts(s)})
		if r.Verdict != Deliverable {
			t.Errorf("%s: %v %s (%v), want deliverable", addr, r.Verdict, r.Reply, r.Err)
		}
	}
	if st := s.Stats(); st.Sessions != 1 {
		t.Errorf("%d sessions, want the one session for all three addresses", st.Sessions)
	}
}
