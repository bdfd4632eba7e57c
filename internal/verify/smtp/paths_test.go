package smtp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// The paths of "the prober on the real internet": each case scripts servers the way real ones
// behave, probes a batch of addresses of one domain through them, and checks every verdict (no
// answer lost) and how politely the servers were treated.
func TestPaths(t *testing.T) {
	t.Parallel()
	senderAtRcpt := mailsim.Reply{Code: 550, Enhanced: "5.7.1", Text: "<verify@probe.mailvet.test>: Sender address rejected: Access denied"}
	senderAtMail := mailsim.Reply{Code: 553, Enhanced: "5.7.1", Text: "Sender address rejected: not owned by you"}
	for _, tc := range []struct {
		name    string
		cfg     Config
		servers []mailsim.ServerOptions // MX hosts in preference order
		n       int                     // addresses u0…u(n-1): even ones exist, odd ones do not
		verdict func(i int) Verdict     // nil: even deliverable, odd undeliverable
		check   func(t *testing.T, s []*mailsim.Server, p *Prober, res []Result)
	}{
		{
			name:    "421 banner: falls back to the next MX",
			servers: []mailsim.ServerOptions{{Banner: &mailsim.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service not available"}}, {}},
			n:       20,
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, res []Result) {
				hostIs(t, res, s[1].Name())
				if st := s[0].Stats(); st.Sessions > 2 {
					t.Errorf("the 421 server saw %d connections for 20 addresses, want ≤ 2", st.Sessions)
				}
			},
		},
		{
			name:    "554 banner: falls back to the next MX",
			servers: []mailsim.ServerOptions{{Banner: &mailsim.Reply{Code: 554, Enhanced: "5.7.1", Text: "No SMTP service here"}}, {}},
			n:       20,
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, res []Result) {
				hostIs(t, res, s[1].Name())
				if st := s[0].Stats(); st.Sessions > 1 {
					t.Errorf("the 554 server saw %d connections, want 1", st.Sessions)
				}
			},
		},
		{
			// Every MX greets with a refusal: the last greeting is the answer (its reason is the
			// reply's: temporarily_unavailable for a 421, policy_blocked for a 554), not
			// "connection refused" — the connection was taken.
			name: "refusing banners on every MX: the last banner is the answer",
			servers: []mailsim.ServerOptions{
				{Banner: &mailsim.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service not available"}},
				{Banner: &mailsim.Reply{Code: 554, Enhanced: "5.7.1", Text: "Client host blocked"}},
			},
			n:       6,
			verdict: func(int) Verdict { return Unknown },
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, res []Result) {
				for i, r := range res {
					if r.Reply.Code != 554 || r.Reply.Enhanced != "5.7.1" || r.Host != s[1].Name() || !errors.Is(r.Err, ErrNoHost) {
						t.Errorf("u%d: reply %s from %q (%v), want the 554 banner of %s", i, r.Reply, r.Host, r.Err, s[1].Name())
					}
				}
			},
		},
		{
			name:    "refused: falls back to the next MX",
			servers: []mailsim.ServerOptions{{Refuse: true}, {}},
			n:       20,
			check: func(t *testing.T, s []*mailsim.Server, p *Prober, res []Result) {
				hostIs(t, res, s[1].Name())
				if dials := p.Stats().Dials - s[1].Stats().Sessions; dials > 2 {
					t.Errorf("%d dials to the refusing address for 20 addresses, want ≤ 2", dials)
				}
			},
		},
		{
			name:    "STARTTLS required",
			servers: []mailsim.ServerOptions{{RequireTLS: true}},
			n:       20,
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, _ []Result) {
				if st := s[0].Stats(); st.TLS == 0 || st.Errors > st.Sessions+st.Rejected {
					t.Errorf("TLS sessions %d, errors %d (sessions %d, rejected %d)", st.TLS, st.Errors, st.Sessions, st.Rejected)
				}
			},
		},
		{
			name:    "start-up cost before the banner",
			cfg:     Config{Timeout: time.Second},
			servers: []mailsim.ServerOptions{{BannerWait: 200 * time.Millisecond}},
			n:       10,
		},
		{
			name:    "452 4.5.3 per transaction: new transactions, no answer lost",
			servers: []mailsim.ServerOptions{{MaxRecipientsPerTransaction: 3}},
			n:       30,
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, _ []Result) {
				st := s[0].Stats()
				if st.MaxRejected >= 10 || st.Throttled != 0 || st.Disconnects != 0 {
					t.Errorf("max rejected in a session %d, throttled %d, disconnects %d", st.MaxRejected, st.Throttled, st.Disconnects)
				}
			},
		},
		{
			name:    "421 too many connections: keeps to the sessions that work",
			cfg:     Config{MaxPerHost: 8},
			servers: []mailsim.ServerOptions{{MaxConnsPerClient: 2, RTT: 5 * time.Millisecond}},
			n:       120,
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, _ []Result) {
				st := s[0].Stats()
				if st.TooMany > 8 {
					t.Errorf("%d connections turned away, want the prober to back off", st.TooMany)
				}
				if st.PeakConcurrent > 2+st.TooMany {
					t.Errorf("peak %d", st.PeakConcurrent)
				}
			},
		},
		{
			name:    "sender refused at RCPT (5.7.1): unknown, not undeliverable",
			servers: []mailsim.ServerOptions{{RcptSenderReply: &senderAtRcpt}},
			n:       12,
			verdict: func(int) Verdict { return Unknown },
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, res []Result) {
				for i, r := range res {
					if r.Reply.Enhanced != "5.7.1" {
						t.Errorf("u%d: reply %s, want the 5.7.1 policy reply", i, r.Reply)
					}
				}
				if st := s[0].Stats(); st.Throttled != 0 {
					t.Errorf("%d replies throttled", st.Throttled)
				}
			},
		},
		{
			// Postfix's reject_unknown_sender_domain, answered at RCPT time (smtpd_delay_reject):
			// a 5.1.8 is about our sender, so no mailbox is called unknown, and no catch-all
			// answer is cached from the probe's refusal.
			name:    "sender's domain refused at RCPT (553 5.1.8): unknown, not undeliverable",
			servers: []mailsim.ServerOptions{{RcptSenderReply: &mailsim.Reply{Code: 553, Enhanced: "5.1.8", Text: "<verify@probe.mailvet.test>: Sender address rejected: Domain not found"}}},
			n:       12,
			verdict: func(int) Verdict { return Unknown },
			check: func(t *testing.T, s []*mailsim.Server, p *Prober, res []Result) {
				for i, r := range res {
					if r.Reply.Enhanced != "5.1.8" {
						t.Errorf("u%d: reply %s, want the 5.1.8 sender refusal", i, r.Reply)
					}
				}
				if known, _ := p.catchAllCached("paths.test"); known {
					t.Error("a catch-all answer was cached from a refusal of our sender")
				}
				if st := s[0].Stats(); st.Throttled != 0 {
					t.Errorf("%d replies throttled", st.Throttled)
				}
			},
		},
		{
			name:    "sender refused at MAIL FROM: unknown",
			servers: []mailsim.ServerOptions{{MailReply: &senderAtMail}},
			n:       12,
			verdict: func(int) Verdict { return Unknown },
			check: func(t *testing.T, _ []*mailsim.Server, _ *Prober, res []Result) {
				for i, r := range res {
					if r.Err == nil || !strings.Contains(r.Err.Error(), "5.7.1") {
						t.Errorf("u%d: %v, want the MAIL FROM refusal", i, r.Err)
					}
				}
			},
		},
		{
			name:    "soft and hard error limits: no session reaches them",
			servers: []mailsim.ServerOptions{{ThrottleAfter: 10, ThrottleDelay: 300 * time.Millisecond, HardErrorLimit: 20}},
			n:       100,
			verdict: func(i int) Verdict {
				if i%10 == 0 {
					return Deliverable
				}
				return Undeliverable
			},
			check: func(t *testing.T, s []*mailsim.Server, _ *Prober, _ []Result) {
				st := s[0].Stats()
				if st.MaxRejected >= 10 || st.Throttled != 0 || st.Disconnects != 0 {
					t.Errorf("max rejected %d, throttled %d, disconnects %d", st.MaxRejected, st.Throttled, st.Disconnects)
				}
				if st.Sessions > 25 {
					t.Errorf("%d sessions for 90 rejected addresses", st.Sessions)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 0, tc.cfg)
			var servers []*mailsim.Server
			for i, o := range tc.servers {
				o.Name = fmt.Sprintf("mx%d.paths.test", i)
				servers = append(servers, b.server(t, o))
			}
			verdict := tc.verdict
			users := []string{}
			for i := range tc.n {
				if verdict == nil && i%2 == 0 || verdict != nil && verdict(i) == Deliverable {
					users = append(users, fmt.Sprintf("u%d", i))
				}
			}
			if verdict == nil {
				verdict = func(i int) Verdict { return [...]Verdict{Deliverable, Undeliverable}[i%2] }
			}
			b.w.AddDomain("paths.test", mailsim.Domain{Users: users})
			var reqs []Request
			for i := range tc.n {
				reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@paths.test", i), Domain: "paths.test", Hosts: hosts(servers...)})
			}
			res := probeAll(t, b.p, reqs)
			for i, r := range res {
				if r.Verdict != verdict(i) {
					t.Errorf("%s: %v on %q (%s, %v), want %v", reqs[i].Addr, r.Verdict, r.Host, r.Reply, r.Err, verdict(i))
				}
			}
			if tc.check != nil {
				tc.check(t, servers, b.p, res)
			}
		})
	}
}

// probeAll runs ProbeAll within 10 s and checks that every address got exactly one answer.
func probeAll(t *testing.T, p *Prober, reqs []Request) []Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[int]int{}
	res := p.ProbeAll(ctx, reqs, func(i int, _ Result) {
		mu.Lock()
		seen[i]++
		mu.Unlock()
	})
	for i := range reqs {
		if seen[i] != 1 {
			t.Errorf("%s answered %d times", reqs[i].Addr, seen[i])
		}
	}
	return res
}

func hostIs(t *testing.T, res []Result, host string) {
	t.Helper()
	for i, r := range res {
		if r.Host != host {
			t.Errorf("u%d answered by %q, want %q", i, r.Host, host)
		}
	}
}

// Once learnt, a server's recipient limit per transaction is kept to: no more 452s.
func TestTxnLimitLearnt(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.limit.test", MaxRecipientsPerTransaction: 3})
	b.w.AddDomain("limit.test", mailsim.Domain{CatchAll: false, Users: []string{"u0"}})
	batch := func(from int) []Request {
		var reqs []Request
		for i := from; i < from+30; i++ {
			reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@limit.test", i), Domain: "limit.test", Hosts: hosts(s)})
		}
		return reqs
	}
	probeAll(t, b.p, batch(0))
	s.ResetStats()
	for i, r := range probeAll(t, b.p, batch(100)) {
		if r.Verdict != Undeliverable {
			t.Errorf("u%d: %v (%s, %v)", 100+i, r.Verdict, r.Reply, r.Err)
		}
	}
	if st := s.Stats(); st.Rejected != 30 {
		t.Errorf("%d rejected recipients for 30 unknown addresses, want 30 (no 452)", st.Rejected)
	}
}

// "Too many recipients" said to a session's first recipient is no limit a fresh session can work
// around: the address is unknown at once, with the reply, instead of session after session
// (about 3,000 in the probe's 1.5 s before). A 452 whose enhanced code says something else
// (4.2.2, a full mailbox) is the mailbox's answer, not a recipient limit.
func TestRecipientLimitOnFirstRecipient(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.rl.test"})
	b.w.AddDomain("rl.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.rl.test"}},
		All: &mailsim.Reply{Code: 452, Enhanced: "4.5.3", Text: "Too many recipients"}})
	b.w.AddDomain("full.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.rl.test"}}, Users: []string{"ann"},
		Mailboxes: map[string]mailsim.Reply{"bob": {Code: 452, Enhanced: "4.2.2", Text: "Recipients mailbox is full"}}})
	for _, c := range []struct{ addr, domain, enhanced string }{
		{"ann@rl.test", "rl.test", "4.5.3"},
		{"bob@full.test", "full.test", "4.2.2"},
	} {
		s.ResetStats()
		start := time.Now()
		r := b.p.Probe(context.Background(), Request{Addr: c.addr, Domain: c.domain, Hosts: hosts(s)})
		if r.Verdict != Unknown || r.Reply.Code != 452 || r.Reply.Enhanced != c.enhanced {
			t.Errorf("%s: %v %s (%v), want unknown with the 452 %s", c.addr, r.Verdict, r.Reply, r.Err, c.enhanced)
		}
		if st := s.Stats(); st.Sessions > 2 || time.Since(start) > time.Second {
			t.Errorf("%s: %d sessions in %v, want at most 2 and no wait for the probe budget", c.addr, st.Sessions, time.Since(start))
		}
	}
}

// A server that takes one recipient per transaction: a domain whose catch-all answer is not known
// yet gets its probe in a transaction of its own, then the address, instead of a window too small
// for both that closed the session and opened another, without end.
func TestOneRecipientPerTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.one.test", MaxRecipientsPerTransaction: 1})
	b.w.AddDomain("a.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.one.test"}}, Users: []string{"ann"}})
	b.w.AddDomain("b.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.one.test"}}, Users: []string{"bob"}})
	for _, c := range []struct{ addr, domain string }{{"ann@a.test", "a.test"}, {"bob@b.test", "b.test"}} {
		start := time.Now()
		r := b.p.Probe(context.Background(), Request{Addr: c.addr, Domain: c.domain, Hosts: hosts(s)})
		if r.Verdict != Deliverable {
			t.Errorf("%s: %v %s (%v), want deliverable", c.addr, r.Verdict, r.Reply, r.Err)
		}
		if time.Since(start) > time.Second {
			t.Errorf("%s took %v", c.addr, time.Since(start))
		}
	}
	if st := s.Stats(); st.Sessions > 3 {
		t.Errorf("%d sessions for two addresses, want at most 3", st.Sessions)
	}
}

// A domain's catch-all probe has the same local part every time, on every worker: greylisting
// lets a (client, sender, recipient) triple in on its retry, and a new local part on each
// re-probe of an async job would be greylisted every time.
func TestProbeLocalIsStable(t *testing.T) {
	a, again, other := probeLocal("grey.test"), probeLocal("grey.test"), probeLocal("blue.test")
	if a != again || a == other || !strings.HasPrefix(a, "mv") || len(a) != 18 {
		t.Errorf("probe local parts %q, %q, %q: want one per domain", a, again, other)
	}
}

// errorsPerSession counts, from the prober's own view of the traffic, the failed commands of each
// session (every reply of 400 or more but QUIT's; a session starts at CONNECT).
type errorsPerSession struct {
	mu  sync.Mutex
	per []int
}

func (o *errorsPerSession) Reply(cmd string, code int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case cmd == "CONNECT":
		o.per = append(o.per, 0)
	case code >= 400 && cmd != "QUIT" && len(o.per) > 0:
		o.per[len(o.per)-1]++
	}
}

func (o *errorsPerSession) max() (n int, all []int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.per {
		n = max(n, e)
	}
	return n, append([]int(nil), o.per...)
}

// A server that demands STARTTLS costs an error (its 530 to the plain MAIL FROM) before the
// RCPTs follow over TLS, and later sessions, which start TLS at once, send a MAIL FROM not yet
// accepted over TLS pipelined with their RCPTs: in both cases the first window keeps room for
// that error, so no session reaches Postfix's 10th.
func TestStartTLSKeepsUnderTheErrorLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts mailsim.ServerOptions
	}{
		{"unknown", mailsim.ServerOptions{RequireTLS: true}},
		{"refused-sender", mailsim.ServerOptions{RequireTLS: true, MailReply: &mailsim.Reply{Code: 554, Enhanced: "5.7.1", Text: "Sender rejected"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := &errorsPerSession{}
			b := setup(t, 0, Config{MaxPerHost: 1, Observer: o})
			c.opts.Name = "mx.tls-" + c.name + ".test"
			s := b.server(t, c.opts)
			dom := "tls-" + c.name + ".test"
			b.w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: c.opts.Name}}})
			var reqs []Request
			for i := range 30 {
				reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@%s", i, dom), Domain: dom, Hosts: hosts(s)})
			}
			probeAll(t, b.p, reqs)
			if n, per := o.max(); n > 9 || len(per) == 0 {
				t.Errorf("errors per session %v: want at most 9 in each", per)
			}
		})
	}
}

// Close returns once the prober's sessions have ended (QUIT answered, connection closed), so that
// the fleet-wide slots they hold are given up only after their connections are gone (docs/fleet.md).
func TestCloseWaitsForSessionsToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, 100*time.Millisecond, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.close.test"})
	b.w.AddDomain("close.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.close.test"}}, Users: []string{"u0"}})
	var reqs []Request
	for i := range 10 {
		reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@close.test", i), Domain: "close.test", Hosts: hosts(s)})
	}
	probeAll(t, b.p, reqs)
	if s.Stats().Open == 0 {
		t.Fatal("no idle session left to close")
	}
	b.p.Close()
	if n := b.p.running.Load(); n != 0 {
		t.Errorf("%d sessions still running when Close returned", n)
	}
	// The server notes the close as it answers QUIT; allow it a moment, far less than the 100 ms
	// a QUIT's answer takes to arrive here.
	for deadline := time.Now().Add(30 * time.Millisecond); s.Stats().Open > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := s.Stats().Open; n > 0 {
		t.Errorf("%d connections still open after Close returned", n)
	}
}

// A domain's catch-all probe that meets the server's recipient limit (not advertised, so learnt
// from the 452 4.5.3) is asked again, like an address: that 452 says nothing about the domain.
// Taken for a deferral, it would answer unknown every accepted address of the domain that another
// session sent while the probe was on its way. Sessions race here, so each trial is a fresh prober
// on a fresh world, and the test runs enough of them to meet the race.
func TestCatchAllProbeOverTheRecipientLimit(t *testing.T) {
	t.Parallel()
	for trial := range 20 {
		b := setup(t, 0, Config{})
		s := b.server(t, mailsim.ServerOptions{Name: "mx.one.test", MaxRecipientsPerTransaction: 1})
		mx := []mailsim.MX{{Pref: 10, Host: "mx.one.test"}}
		domains := []string{"a.one.test", "b.one.test", "c.one.test"}
		for _, d := range domains[:2] {
			b.w.AddDomain(d, mailsim.Domain{MX: mx, Users: []string{"u0", "u2"}})
		}
		b.w.AddDomain("c.one.test", mailsim.Domain{MX: mx, CatchAll: true})
		var reqs []Request
		var want []Verdict
		for i := range 4 {
			for _, d := range domains {
				reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@%s", i, d), Domain: d, Hosts: hosts(s)})
				switch {
				case d == "c.one.test":
					want = append(want, CatchAll)
				case i%2 == 0:
					want = append(want, Deliverable)
				default:
					want = append(want, Undeliverable)
				}
			}
		}
		for i, r := range probeAll(t, b.p, reqs) {
			if r.Verdict != want[i] {
				t.Errorf("trial %d, %s: %v (%s, %v), want %v", trial, reqs[i].Addr, r.Verdict, r.Reply, r.Err, want[i])
			}
		}
		if st := s.Stats(); st.MaxRejected >= 10 || st.Throttled != 0 {
			t.Errorf("trial %d: max rejected %d, throttled %d", trial, st.MaxRejected, st.Throttled)
		}
		b.p.Close()
		b.w.Close()
	}
}

// A batch's address has the probe budget from its first try even when that try is a dial that
// fails: silent MX hosts (tarpits: they take the connection and never greet), tried one after
// the other, each for half the budget, and the half-open retry of the last one, stretched it
// before — (n+1) half-budgets and a pause for n of them, 2.25 s for three at a 1 s budget.
func TestSilentMXHostsKeepToTheBudget(t *testing.T) {
	t.Parallel()
	const budget = time.Second
	for _, n := range []int{1, 3} {
		b := setup(t, 0, Config{Timeout: budget})
		var servers []*mailsim.Server
		for i := range n {
			servers = append(servers, b.server(t, mailsim.ServerOptions{Name: fmt.Sprintf("tp%d.silent%d.test", i, n), Tarpit: true}))
		}
		domain := fmt.Sprintf("silent%d.test", n)
		var reqs []Request
		for i := range 4 {
			reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@%s", i, domain), Domain: domain, Hosts: hosts(servers...)})
		}
		start := time.Now()
		res := probeAll(t, b.p, reqs)
		took := time.Since(start)
		for i, r := range res {
			if r.Verdict != Unknown || !errors.Is(r.Err, ErrTimeout) {
				t.Errorf("%d silent hosts, u%d: %v (%v), want unknown, timeout", n, i, r.Verdict, r.Err)
			}
		}
		if took > budget+150*time.Millisecond {
			t.Errorf("%d silent hosts: answered after %v, want the %v budget", n, took, budget)
		}
	}
}

// A catch-all probe refused by policy (a 5.7.1 for local parts the server will not say anything
// about) says nothing about the domain: the accepted address is unknown with that reply, so its
// reason is the reply's (policy_blocked), not a bare "inconclusive" (temporarily_unavailable,
// though nothing temporary happened).
func TestCatchAllProbeRefusedByPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.policy.test"})
	refusal := mailsim.Reply{Code: 550, Enhanced: "5.7.1", Text: "Recipient address rejected: Access denied"}
	b.w.AddDomain("policy.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.policy.test"}}, Users: []string{"ann"},
		Mailboxes: map[string]mailsim.Reply{probeLocal("policy.test"): refusal}})
	r := b.p.Probe(context.Background(), Request{Addr: "ann@policy.test", Domain: "policy.test", Hosts: hosts(s)})
	if r.Verdict != Unknown || r.Reply.Code != 550 || r.Reply.Enhanced != "5.7.1" {
		t.Errorf("ann: %v %s (%v), want unknown with the probe's 550 5.7.1", r.Verdict, r.Reply, r.Err)
	}
	if known, _ := b.p.catchAllCached("policy.test"); known {
		t.Error("a catch-all answer was cached from a policy refusal")
	}
}

// That bound is on the time spent on hosts that cannot be reached, not on the wait for a free
// session of one that works: a batch larger than the backup MX serves within the budget, whose
// primary refuses, is answered in full by the backup. (A first version gave every queued address
// its deadline at the primary's failed dial, and most of such a batch timed out.)
func TestRefusedPrimaryLeavesTheBatchToTheBackup(t *testing.T) {
	t.Parallel()
	const budget = 400 * time.Millisecond
	b := setup(t, 10*time.Millisecond, Config{Timeout: budget, MaxPerHost: 1})
	primary := b.server(t, mailsim.ServerOptions{Name: "mx1.backup.test", Refuse: true})
	backup := b.server(t, mailsim.ServerOptions{Name: "mx2.backup.test"})
	const n = 200
	var users []string
	for i := 0; i < n; i += 2 {
		users = append(users, fmt.Sprintf("u%d", i))
	}
	b.w.AddDomain("backup.test", mailsim.Domain{Users: users})
	var reqs []Request
	for i := range n {
		reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@backup.test", i), Domain: "backup.test", Hosts: hosts(primary, backup)})
	}
	start := time.Now()
	res := probeAll(t, b.p, reqs)
	took := time.Since(start)
	for i, r := range res {
		want := [...]Verdict{Deliverable, Undeliverable}[i%2]
		if r.Verdict != want || r.Host != backup.Name() {
			t.Errorf("u%d: %v on %q (%v), want %v on the backup", i, r.Verdict, r.Host, r.Err, want)
		}
	}
	if took < budget {
		t.Errorf("the batch took %v, less than the %v budget: the test no longer makes addresses wait", took, budget)
	}
}
