package smtp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// loopbackOnly is MAILVET_SMTP_ALLOW_CIDRS for a mailsim world.
var loopbackOnly = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

type bundle struct {
	w *mailsim.World
	p *Prober
}

func setup(t testing.TB, rtt time.Duration, cfg Config) *bundle {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{RTT: rtt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	cfg.Port = w.SMTPPort()
	cfg.Helo, cfg.MailFrom = "probe.mailvet.test", "verify@probe.mailvet.test"
	if cfg.AllowCIDRs == nil {
		// The world's servers are on 127.0.0.x, which the prober refuses unless allowed.
		cfg.AllowCIDRs = loopbackOnly
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &bundle{w: w, p: p}
}

func (b *bundle) server(t testing.TB, opts mailsim.ServerOptions) *mailsim.Server {
	t.Helper()
	s, err := b.w.AddServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hosts(servers ...*mailsim.Server) []Host {
	var hs []Host
	for _, s := range servers {
		hs = append(hs, Host{Name: s.Name(), Addrs: []netip.Addr{s.Addr()}})
	}
	return hs
}

func TestProbe(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 600 * time.Millisecond})
	plain := b.server(t, mailsim.ServerOptions{Name: "mx.plain.test"})
	tlsOnly := b.server(t, mailsim.ServerOptions{Name: "mx.tls.test", RequireTLS: true})
	tarpit := b.server(t, mailsim.ServerOptions{Name: "mx.tarpit.test", Tarpit: true})
	refused := b.server(t, mailsim.ServerOptions{Name: "mx.refused.test", Refuse: true})
	slow := b.server(t, mailsim.ServerOptions{Name: "mx.slow.test", ReplyDelay: time.Second})
	nopipe := b.server(t, mailsim.ServerOptions{Name: "mx.nopipe.test", NoPipelining: true})

	b.w.AddDomain("plain.test", mailsim.Domain{Users: []string{"ann"}, Mailboxes: map[string]mailsim.Reply{
		"grey":   mailsim.ReplyGreylisted,
		"policy": mailsim.ReplyPolicy,
		"moved":  {Code: 551, Text: "User not local"},
		"relay":  {Code: 550, Enhanced: "5.7.1", Text: "Relaying denied"},
		"full":   {Code: 552, Enhanced: "5.2.2", Text: "Mailbox full"},
	}})
	b.w.AddDomain("catchall.test", mailsim.Domain{CatchAll: true})
	b.w.AddDomain("tls.test", mailsim.Domain{Users: []string{"ann"}})
	b.w.AddDomain("nopipe.test", mailsim.Domain{Users: []string{"ann"}})
	b.w.AddDomain("greylist.test", mailsim.Domain{All: &mailsim.ReplyGreylisted})
	// The fallback cases have domains of their own: a domain's catch-all check is shared by the
	// probes of that domain in flight, and one made through a tarpit or a slow server comes back
	// inconclusive for every probe waiting on it, which is not what these cases are about.
	for _, d := range []string{"refused.test", "tarpit.test", "tarpitonly.test", "slowonly.test"} {
		b.w.AddDomain(d, mailsim.Domain{Users: []string{"ann"}})
	}

	for _, tc := range []struct {
		name  string
		addr  string
		hosts []Host
		want  Verdict
		host  string
	}{
		{"deliverable", "ann@plain.test", hosts(plain), Deliverable, "mx.plain.test"},
		{"unknown user 5.1.1", "bob@plain.test", hosts(plain), Undeliverable, "mx.plain.test"},
		{"551 without enhanced code", "moved@plain.test", hosts(plain), Undeliverable, "mx.plain.test"},
		{"greylisted 450", "grey@plain.test", hosts(plain), Unknown, "mx.plain.test"},
		{"policy 554 5.7.1", "policy@plain.test", hosts(plain), Unknown, "mx.plain.test"},
		{"550 5.7.1 is a policy block", "relay@plain.test", hosts(plain), Unknown, "mx.plain.test"},
		{"552 mailbox full", "full@plain.test", hosts(plain), Unknown, "mx.plain.test"},
		{"catch-all", "anyone@catchall.test", hosts(plain), CatchAll, "mx.plain.test"},
		{"greylisting domain with a catch-all probe", "ann@greylist.test", hosts(plain), Unknown, "mx.plain.test"},
		{"STARTTLS required", "ann@tls.test", hosts(tlsOnly), Deliverable, "mx.tls.test"},
		{"STARTTLS required, unknown user", "bob@tls.test", hosts(tlsOnly), Undeliverable, "mx.tls.test"},
		{"no PIPELINING", "ann@nopipe.test", hosts(nopipe), Deliverable, "mx.nopipe.test"},
		{"no PIPELINING, unknown user", "bob@nopipe.test", hosts(nopipe), Undeliverable, "mx.nopipe.test"},
		{"refused, falls back to the second MX", "ann@refused.test", hosts(refused, plain), Deliverable, "mx.plain.test"},
		{"tarpit, falls back within the budget", "ann@tarpit.test", hosts(tarpit, plain), Deliverable, "mx.plain.test"},
		{"tarpit only", "ann@tarpitonly.test", hosts(tarpit), Unknown, ""},
		{"slow replies", "ann@slowonly.test", hosts(slow), Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := b.p.Probe(context.Background(), Request{Addr: tc.addr, Domain: domainOf(tc.addr), Hosts: tc.hosts})
			if took := time.Since(start); took > 700*time.Millisecond {
				t.Errorf("took %v, over the 600ms budget", took)
			}
			if r.Verdict != tc.want || (tc.host != "" && r.Host != tc.host) {
				t.Fatalf("Probe(%s) = %v on %q (%s, %v), want %v on %q", tc.addr, r.Verdict, r.Host, r.Reply, r.Err, tc.want, tc.host)
			}
		})
	}
	t.Run("STARTTLS negotiated", func(t *testing.T) {
		t.Parallel()
		b.p.Probe(context.Background(), Request{Addr: "x@tls.test", Domain: "tls.test", Hosts: hosts(tlsOnly)})
		if tlsOnly.Stats().TLS == 0 {
			t.Fatal("no TLS session on the STARTTLS-only server")
		}
	})
}

func domainOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == '@' {
			return addr[i+1:]
		}
	}
	return ""
}

func TestBlockedNeverDialled(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Blocked: []string{"corp-blocks.test"}})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.any.test"})
	b.w.AddDomain("gmail.com", mailsim.Domain{CatchAll: true})
	for _, d := range []string{"gmail.com", "googlemail.com", "yahoo.co.uk", "yahoo.com", "hotmail.fr", "outlook.com", "live.com", "msn.com", "aol.com", "icloud.com", "me.com", "mac.com", "corp-blocks.test", "mail.corp-blocks.test"} {
		r := b.p.Probe(context.Background(), Request{Addr: "ann@" + d, Domain: d, Hosts: hosts(s)})
		if !r.Blocked || r.Verdict != Unknown {
			t.Errorf("%s: %+v, want blocked and unknown", d, r)
		}
	}
	for _, d := range []string{"yahoo.example.co.uk", "notgmail.com", "gmail.community"} {
		if b.p.Blocked(d) {
			t.Errorf("%s is blocked", d)
		}
	}
	if st := s.Stats(); st.Sessions != 0 {
		t.Fatalf("the server saw %d sessions, want 0", st.Sessions)
	}
}

func TestSessionReuseAndCatchAllCache(t *testing.T) {
	t.Parallel()
	b := setup(t, 20*time.Millisecond, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.reuse.test"})
	b.w.AddDomain("reuse.test", mailsim.Domain{Users: []string{"ann", "bob"}})
	b.w.AddDomain("ca.test", mailsim.Domain{CatchAll: true})
	probe := func(addr string) Result {
		return b.p.Probe(context.Background(), Request{Addr: addr, Domain: domainOf(addr), Hosts: hosts(s)})
	}

	if r := probe("ann@reuse.test"); r.Verdict != Deliverable {
		t.Fatalf("first probe: %+v", r)
	}
	first := b.p.Stats()
	// Fresh domain: connect+banner, EHLO, MAIL, RCPT address + random local part pipelined.
	if first.RoundTrips > 5 || first.Sessions != 1 {
		t.Fatalf("fresh domain took %d round trips in %d sessions, want ≤ 5 in 1", first.RoundTrips, first.Sessions)
	}
	start := time.Now()
	if r := probe("bob@reuse.test"); r.Verdict != Deliverable {
		t.Fatalf("second probe: %+v", r)
	}
	took := time.Since(start)
	second := b.p.Stats()
	if rt := second.RoundTrips - first.RoundTrips; rt > 2 || second.Sessions != 1 {
		t.Fatalf("second address took %d round trips, %d sessions in all; want ≤ 2 on the same session", rt, second.Sessions)
	}
	// The counted round trips above are the proof; the time is only reported (a loaded machine
	// stretches it, and a timed assertion here failed under load at 81 ms for one 20 ms trip).
	t.Logf("second address on the open session: %v", took)

	if r := probe("x@ca.test"); r.Verdict != CatchAll {
		t.Fatalf("catch-all: %+v", r)
	}
	rcpts := s.Stats().Rcpts
	if r := probe("y@ca.test"); r.Verdict != CatchAll {
		t.Fatalf("catch-all, cached: %+v", r)
	}
	if s.Stats().Rcpts != rcpts {
		t.Fatal("a cached catch-all domain was probed again")
	}
}

func TestPerHostCapAndErrorBudget(t *testing.T) {
	t.Parallel()
	const capPerHost = 3
	b := setup(t, 5*time.Millisecond, Config{MaxPerHost: capPerHost})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.shared.test"})
	var reqs []Request
	for d := range 10 {
		dom := fmt.Sprintf("d%d.shared.test", d)
		b.w.AddDomain(dom, mailsim.Domain{Users: []string{"u0", "u2", "u4", "u6", "u8"}})
		for u := range 10 {
			reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@%s", u, dom), Domain: dom, Hosts: hosts(s)})
		}
	}
	var mu sync.Mutex
	seen := map[int]bool{}
	start := time.Now()
	res := b.p.ProbeAll(context.Background(), reqs, func(i int, r Result) {
		mu.Lock()
		defer mu.Unlock()
		if seen[i] {
			t.Errorf("result %d delivered twice", i)
		}
		seen[i] = true
	})
	took := time.Since(start)
	for i, r := range res {
		want := Undeliverable
		if i%2 == 0 {
			want = Deliverable
		}
		if r.Verdict != want {
			t.Errorf("%s: %v (%s, %v), want %v", reqs[i].Addr, r.Verdict, r.Reply, r.Err, want)
		}
	}
	st := s.Stats()
	if st.PeakConcurrent > capPerHost {
		t.Errorf("peak %d concurrent sessions, cap %d", st.PeakConcurrent, capPerHost)
	}
	if st.MaxRejected >= 10 || st.Throttled != 0 {
		t.Errorf("a session collected %d rejections (%d replies throttled), want < 10", st.MaxRejected, st.Throttled)
	}
	if len(seen) != len(reqs) {
		t.Errorf("each called for %d of %d", len(seen), len(reqs))
	}
	if took > time.Second {
		t.Errorf("took %v", took)
	}
}

func TestContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 5 * time.Second})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.slow.test", ReplyDelay: 2 * time.Second})
	b.w.AddDomain("slow.test", mailsim.Domain{Users: []string{"ann"}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := b.p.ProbeAll(ctx, []Request{{Addr: "ann@slow.test", Domain: "slow.test", Hosts: hosts(s)}}, nil)
	if res[0].Verdict != Unknown || !errors.Is(res[0].Err, ErrTimeout) {
		t.Fatalf("%+v", res[0])
	}
}
