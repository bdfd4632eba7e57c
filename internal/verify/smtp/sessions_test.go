package smtp

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// postfixLimits are Postfix's stock error limits (smtpd_soft_error_limit 10, with a 1 s delay on
// every reply after it, and smtpd_hard_error_limit 20) and a per-client connection limit.
func postfixLimits(name string, conns int) mailsim.ServerOptions {
	return mailsim.ServerOptions{
		Name: name, ThrottleAfter: 10, ThrottleDelay: time.Second, HardErrorLimit: 20,
		MaxConnsPerClient: conns,
	}
}

// halfUnknown adds domains×50 addresses on srv's domains, every other one an unknown mailbox,
// and returns the requests and the verdicts they must get.
func halfUnknown(b *bundle, srv *mailsim.Server, prefix string, domains int) ([]Request, []Verdict) {
	var (
		reqs []Request
		want []Verdict
	)
	for d := range domains {
		dom := fmt.Sprintf("%s%02d.test", prefix, d)
		var users []string
		for u := range 50 {
			local := fmt.Sprintf("user%02d", u)
			reqs = append(reqs, Request{Addr: local + "@" + dom, Domain: dom, Hosts: hosts(srv)})
			if u%2 == 0 {
				users = append(users, local)
				want = append(want, Deliverable)
			} else {
				want = append(want, Undeliverable)
			}
		}
		b.w.AddDomain(dom, mailsim.Domain{Users: users})
	}
	return reqs, want
}

// A batch opens about as many sessions as its rejections need, not one per window of the
// queue: the pool counts what the sessions already open can still take at the rejection rate
// the address has shown (docs/architecture.md, "The verification pipeline"). The world is
// BenchmarkOracle's (internal/verify): 1,000 addresses on 20 domains behind one MX, half of them
// unknown, 20 ms RTT, Postfix's error limits, 40 connections. The 500 unknown addresses and the
// 20 catch-all probes make 520 rejections; at most 9 per session that is ⌈520/9⌉ = 58 sessions
// at the very least. The pool must stay within 15 % of that floor (a pool that opened a session
// per 9 queued addresses would end the batch with 40 half-used ones: 78–80 sessions), and stay
// polite: never more than MaxPerHost connections, never a 10th rejection in a session.
func TestSessionsFollowTheRejectionRate(t *testing.T) {
	t.Parallel()
	const perHost = 40
	b := setup(t, 20*time.Millisecond, Config{MaxPerHost: perHost, Timeout: 3 * time.Second})
	srv := b.server(t, postfixLimits("mx.rate.test", perHost))
	reqs, want := halfUnknown(b, srv, "rate", 20)

	res := probeAll(t, b.p, reqs)
	for i, r := range res {
		if r.Verdict != want[i] {
			t.Errorf("%s: %v (%s, %v), want %v", reqs[i].Addr, r.Verdict, r.Reply, r.Err, want[i])
		}
	}
	st := srv.Stats()
	if st.PeakConcurrent > perHost || st.TooMany != 0 {
		t.Errorf("peak %d connections, %d turned away; cap %d", st.PeakConcurrent, st.TooMany, perHost)
	}
	if st.MaxRejected >= 10 || st.Throttled != 0 || st.Disconnects != 0 {
		t.Errorf("a session had %d rejections (%d replies throttled, %d hang-ups), want at most 9", st.MaxRejected, st.Throttled, st.Disconnects)
	}
	floor := int64(math.Ceil(float64(st.Rejected) / maxErrors))
	if limit := floor * 115 / 100; st.Sessions > limit {
		t.Errorf("%d sessions for %d rejections, want at most %d (the floor %d + 15 %%)", st.Sessions, st.Rejected, limit, floor)
	}
	if testing.Verbose() {
		t.Logf("%d sessions for %d rejections", st.Sessions, st.Rejected)
	}
}

// The first session to a never-reached address opens alone, but the others the queue needs dial
// as soon as its banner is in, not after its EHLO as well: one round trip sooner.
func TestOthersDialAfterTheFirstBanner(t *testing.T) {
	t.Parallel()
	// A long round trip, so that a loaded machine's scheduling delays (50 ms seen under a full
	// CI run beside other work) stay small beside the half round trip the check allows.
	const rtt = 200 * time.Millisecond
	b := setup(t, rtt, Config{MaxPerHost: 4, Timeout: 3 * time.Second})
	srv := b.server(t, mailsim.ServerOptions{Name: "mx.banner.test"})
	b.w.AddDomain("banner.test", mailsim.Domain{Users: []string{"u0"}})
	td := &timedDialer{next: b.p.dialer}
	b.p.dialer = td
	var reqs []Request
	for i := range 20 { // more than one session's window
		reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@banner.test", i), Domain: "banner.test", Hosts: hosts(srv)})
	}

	probeAll(t, b.p, reqs)
	at := td.times()
	if len(at) < 2 {
		t.Fatalf("%d dials, want several for 20 addresses", len(at))
	}
	// The second dial waits for the first banner (one round trip), no longer: after the EHLO
	// reply as well it would come two round trips after the first.
	if gap := at[1].Sub(at[0]); gap < rtt*3/4 || gap > rtt*3/2 {
		t.Errorf("second dial %v after the first, want about one round trip (%v)", gap, rtt)
	}
}

// timedDialer records when each connection was dialled.
type timedDialer struct {
	next interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	}
	mu sync.Mutex
	at []time.Time
}

func (d *timedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.at = append(d.at, time.Now())
	d.mu.Unlock()
	return d.next.DialContext(ctx, network, addr)
}

func (d *timedDialer) times() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.at...)
}

// A server that does not offer STARTTLS gets the first MAIL FROM with the RCPTs: a fresh
// address costs connect, EHLO and one exchange (the address and its domain's catch-all probe).
func TestFirstMailPipelined(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.first.test"})
	b.w.AddDomain("first.test", mailsim.Domain{Users: []string{"ann"}})
	r := b.p.Probe(context.Background(), Request{Addr: "ann@first.test", Domain: "first.test", Hosts: hosts(s)})
	if r.Verdict != Deliverable {
		t.Fatalf("%+v", r)
	}
	if st := b.p.Stats(); st.RoundTrips != 3 || st.Sessions != 1 {
		t.Errorf("%d round trips in %d sessions, want 3 (banner, EHLO, MAIL with the RCPTs) in 1", st.RoundTrips, st.Sessions)
	}
}

// testPool is a pool of an address nothing listens on, for fillLocked's decisions, with n
// addresses of a domain whose catch-all answer is known (so that no probe joins a window).
func testPool(t *testing.T, n int) (*Prober, *pool) {
	t.Helper()
	p, err := New(Config{Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test", MaxPerHost: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.ca["known.test"] = &caState{known: true, expires: time.Now().Add(time.Hour)}
	pl := p.pool(netip.MustParseAddr("192.0.2.1"))
	pl.proven = true
	for i := range n {
		j := &job{addr: fmt.Sprintf("u%d@known.test", i), domain: "known.test", targets: []target{{host: "mx", ip: pl.ip}}}
		j.finishFn = func(Result) {}
		pl.queue = append(pl.queue, j)
	}
	return p, pl
}

// The window of an exchange never exceeds what the session's error budget can absorb if every
// RCPT is rejected — and when no MAIL FROM has been accepted here yet, if the MAIL is refused as
// well (a refused MAIL makes every RCPT behind it fail; a 530 "start TLS first" is one more
// error before the RCPTs go over TLS).
func TestWindowKeepsToTheBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                     string
		errors                   int
		inTxn, plainOK, starttls bool
		want                     int
	}{
		{"fresh session, MAIL unproven, pipelined with the RCPTs", 0, false, false, false, maxErrors - 1},
		{"fresh session, MAIL proven here", 0, false, true, false, maxErrors},
		{"fresh session, STARTTLS offered: MAIL goes alone, and may get a 530 first", 0, false, false, true, maxErrors - 1},
		{"open transaction, 5 errors", 5, true, false, false, maxErrors - 5},
		{"one error left, MAIL unproven: MAIL goes alone", maxErrors - 1, false, false, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, pl := testPool(t, 30)
			s := &session{pl: pl, pipelining: true, rcptMax: 100, errors: tc.errors, inTxn: tc.inTxn, starttls: tc.starttls}
			pl.mu.Lock()
			pl.plainOK = tc.plainOK
			batch := pl.fillLocked(s)
			pl.mu.Unlock()
			if len(batch) != tc.want {
				t.Errorf("window %d, want %d", len(batch), tc.want)
			}
		})
	}
}

// A session down to its last three errors, while every connection the server tolerates is open
// and the queue has work for a fresh session, sends its last RCPTs with QUIT to make room; not
// when a connection is free, nor with more budget left, nor when the queue is nearly done, nor
// when the fresh sessions that will replace those already retiring take what is left.
func TestLastRCPTTravelsWithQuit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		errors   int
		sessions int
		queue    int
		retiring int // other open sessions whose QUIT travels with their exchange under way
		want     bool
	}{
		{"last error, every slot taken, long queue", maxErrors - 1, 3, 100, 0, true},
		{"a slot is free: open a session instead", maxErrors - 1, 2, 100, 0, false},
		{"two errors left", maxErrors - 2, 3, 100, 0, true},
		{"three errors left", maxErrors - 3, 3, 100, 0, true},
		{"four errors left", maxErrors - 4, 3, 100, 0, false},
		{"the queue is nearly done", maxErrors - 1, 3, 2, 0, false},
		// The prior rejection rate is 1 here: a fresh session is counted on for maxErrors RCPTs.
		{"another retires: its replacement takes the queue", maxErrors - 1, 3, maxErrors + 5, 1, false},
		{"another retires: work for a second fresh session", maxErrors - 1, 3, 2*maxErrors + 1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, pl := testPool(t, tc.queue)
			s := &session{pl: pl, pipelining: true, rcptMax: 100, errors: tc.errors, inTxn: true}
			pl.mu.Lock()
			pl.sessions = tc.sessions
			pl.live = map[*session]struct{}{s: {}}
			for range tc.retiring {
				// Down to its last error, with its last RCPT in flight: taking nothing more.
				pl.live[&session{pl: pl, errors: maxErrors - 1, left: 1, inflight: 1, last: true}] = struct{}{}
			}
			batch := pl.fillLocked(s)
			pl.mu.Unlock()
			if len(batch) != maxErrors-tc.errors && len(batch) != tc.queue {
				t.Errorf("window %d", len(batch))
			}
			if s.last != tc.want {
				t.Errorf("last = %v, want %v", s.last, tc.want)
			}
		})
	}
}

// expectedRcpts: a session is counted on for its budget alone while every RCPT may fail, and
// for its budget × (1 + ½ + ¼ …) over the horizon's exchanges at a rejection rate of one half.
func TestExpectedRcpts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ budget, rho, want float64 }{
		{9, 1, 9},
		{9, 0.5, 9 * (2 - math.Pow(0.5, horizon-1))},
		{4, 0.5, 4 * (2 - math.Pow(0.5, horizon-1))},
		{0, 0.5, 0},
		{-2, 0.5, 0},
		{9, 0.02, 9 * (1 - math.Pow(0.98, horizon)) / 0.02},
	} {
		if got := expectedRcpts(tc.budget, tc.rho); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("expectedRcpts(%v, %v) = %v, want %v", tc.budget, tc.rho, got, tc.want)
		}
	}
}
