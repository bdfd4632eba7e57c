package smtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// failNthDial fails the nth dial (1-based) to addr, as a server restarting would: one transient
// refused connection.
type failNthDial struct {
	next proxy.ContextDialer
	addr string
	nth  int

	mu sync.Mutex
	n  int
}

func (d *failNthDial) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == d.addr {
		d.mu.Lock()
		d.n++
		fail := d.n == d.nth
		d.mu.Unlock()
		if fail {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connect: connection refused")}
		}
	}
	return d.next.DialContext(ctx, network, addr)
}

// A transient failed dial to the only working MX host, in the middle of a batch, is bridged by
// the half-open retry (250 ms later) whether or not the domain's primary MX refused earlier. With
// the primary refused, every queued address has spent a moment on an unreachable host; the wait
// at the working backup is not counted against it (it once was, and the backup's one failed
// dial, more than a budget later, answered the whole queue unknown/timeout at once).
func TestTransientBackupFailureAfterARefusedPrimary(t *testing.T) {
	t.Parallel()
	const budget = 400 * time.Millisecond
	for _, withPrimary := range []bool{false, true} {
		t.Run(fmt.Sprintf("primary=%v", withPrimary), func(t *testing.T) {
			b := setup(t, 10*time.Millisecond, Config{Timeout: budget, MaxPerHost: 1})
			name := fmt.Sprintf("tb%v.test", withPrimary)
			primary := b.server(t, mailsim.ServerOptions{Name: "mx1." + name, Refuse: true})
			backup := b.server(t, mailsim.ServerOptions{Name: "mx2." + name})
			b.p.dialer = &failNthDial{next: b.p.dialer, addr: fmt.Sprintf("%s:%d", backup.Addr(), b.p.cfg.Port), nth: 6}
			const n = 200
			var users []string
			for i := 0; i < n; i += 2 {
				users = append(users, fmt.Sprintf("u%d", i))
			}
			b.w.AddDomain(name, mailsim.Domain{Users: users})
			hs := hosts(backup)
			if withPrimary {
				hs = hosts(primary, backup)
			}
			var reqs []Request
			for i := range n {
				reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@%s", i, name), Domain: name, Hosts: hs})
			}
			start := time.Now()
			res := probeAll(t, b.p, reqs)
			bad := 0
			for i, r := range res {
				want := [...]Verdict{Deliverable, Undeliverable}[i%2]
				if r.Verdict != want {
					bad++
					if bad <= 3 {
						t.Errorf("u%d: %v on %q (%v), want %v", i, r.Verdict, r.Host, r.Err, want)
					}
				}
			}
			t.Logf("%d of %d wrong, took %v, backup sessions %d", bad, n, time.Since(start), backup.Stats().Sessions)
			if bad > 0 {
				t.Errorf("%d of %d addresses wrong after one refused dial to the working backup", bad, n)
			}
		})
	}
}

// Close while a batch is in flight: the addresses still queued are answered (ProbeAll returns)
// and the prober stops dialling.
func TestCloseDuringABatchAnswersTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, 10*time.Millisecond, Config{MaxPerHost: 1})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.closing.test"})
	b.w.AddDomain("closing.test", mailsim.Domain{Users: []string{"u0"}})
	var reqs []Request
	for i := range 300 {
		reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@closing.test", i), Domain: "closing.test", Hosts: hosts(s)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() { time.Sleep(150 * time.Millisecond); b.p.Close() }()
	start := time.Now()
	res := b.p.ProbeAll(ctx, reqs, nil)
	took := time.Since(start)
	timeouts := 0
	for _, r := range res {
		if errors.Is(r.Err, ErrTimeout) {
			timeouts++
		}
	}
	t.Logf("ProbeAll returned after %v; %d timeouts; dials %d, server sessions %d", took, timeouts, b.p.Stats().Dials, s.Stats().Sessions)
	if took > 2*time.Second {
		t.Errorf("ProbeAll returned only at its context's deadline (%v) after Close", took)
	}
	closed := 0
	for i, r := range res {
		switch {
		case errors.Is(r.Err, ErrClosed):
			closed++
		case r.Verdict == Unknown && r.Err == nil:
			t.Errorf("u%d: answered unknown without a reason", i)
		}
	}
	if closed == 0 {
		t.Errorf("no address was answered %v: Close came after the whole batch", ErrClosed)
	}
	if d := b.p.Stats().Dials; d > 5 {
		t.Errorf("%d dials: the prober went on opening sessions after Close", d)
	}
}

// resetConn breaks, as a reset connection would, on the first read after a RCPT was written,
// once a while has passed.
type resetConn struct {
	net.Conn
	after time.Duration
	rcpt  bool
}

func (c *resetConn) Write(b []byte) (int, error) {
	if strings.Contains(string(b), "RCPT TO") {
		c.rcpt = true
	}
	return c.Conn.Write(b)
}

func (c *resetConn) Read(b []byte) (int, error) {
	if c.rcpt {
		time.Sleep(c.after)
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("read: connection reset by peer")}
	}
	return c.Conn.Read(b)
}

// scriptDialer: the first dial connects (through resetConn), the second is refused if
// refuseSecond, and every later one hangs until its deadline (a host that does not answer).
type scriptDialer struct {
	next         proxy.ContextDialer
	refuseSecond bool
	mu           sync.Mutex
	n            int
}

func (d *scriptDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.n++
	n := d.n
	d.mu.Unlock()
	switch {
	case n == 1:
		c, err := d.next.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &resetConn{Conn: c, after: 900 * time.Millisecond}, nil
	case n == 2 && d.refuseSecond:
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connect: connection refused")}
	default:
		<-ctx.Done()
		return nil, ctx.Err()
	}
}

// A batch address that a session took (its budget runs from then) and handed back after the
// connection broke, whose MX then fails to answer, is answered when its budget ends — not when
// the half-open retry gives up (after a refused redial), nor when a silent redial gives up, half
// a budget later: a timer watches the deadline while no session is open.
func TestTakenAddressKeepsItsDeadlineWhileTheHostIsDown(t *testing.T) {
	t.Parallel()
	for _, refused := range []bool{true, false} {
		t.Run(fmt.Sprintf("redial refused=%v", refused), func(t *testing.T) {
			t.Parallel()
			const budget = time.Second
			b := setup(t, 0, Config{Timeout: budget, MaxPerHost: 1})
			s := b.server(t, mailsim.ServerOptions{Name: "mx.reset.test"})
			b.w.AddDomain("reset.test", mailsim.Domain{Users: []string{"ann"}})
			b.p.dialer = &scriptDialer{next: b.p.dialer, refuseSecond: refused}
			start := time.Now()
			res := probeAll(t, b.p, []Request{{Addr: "ann@reset.test", Domain: "reset.test", Hosts: hosts(s)}})
			took := time.Since(start)
			t.Logf("%v (%v) after %v", res[0].Verdict, res[0].Err, took)
			if took > budget+150*time.Millisecond {
				t.Errorf("answered after %v, past the %v budget that began when a session took it", took, budget)
			}
		})
	}
}

// A re-asked catch-all probe that its deadline's timer (or another resolver) has already
// answered is no work: a session that finds only it in the pool goes idle rather than closing
// (take's nil means "close the session").
func TestAnsweredProbeDoesNotCloseASession(t *testing.T) {
	t.Parallel()
	p, pl := testPool(t, 0)
	cp := &caProbe{domain: "x.test", local: probeLocal("x.test"), done: make(chan struct{})}
	p.ca["x.test"] = &caState{inflight: cp}
	p.resolveCatchAll(cp, caInconclusive) // the reask timer fired
	s := &session{pl: pl, pipelining: true, rcptMax: 100, wake: make(chan struct{}, 1)}
	pl.mu.Lock()
	pl.probes = []rcpt{{probe: cp, deadline: time.Now().Add(time.Second)}}
	pl.live = map[*session]struct{}{s: {}}
	pl.sessions = 1
	pl.mu.Unlock()
	got := make(chan []rcpt, 1)
	go func() { got <- pl.take(s) }()
	select {
	case b := <-got:
		t.Errorf("take returned %v at once: the session is closed for a probe already answered", b)
	case <-time.After(200 * time.Millisecond):
		// idle, as it should be; wake it so that the goroutine ends
		p.Close()
		<-got
	}
}

// hangDialer hangs every dial until its deadline.
type hangDialer struct{}

func (hangDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Close at various moments of a batch over working, refusing, silent and flaky MX hosts, with
// failover between them: every address answered once, ProbeAll returns soon after Close, no race.
func TestCloseAtAnyMomentOfABatch(t *testing.T) {
	for round := range 8 {
		b := setup(t, 2*time.Millisecond, Config{Timeout: 600 * time.Millisecond, MaxPerHost: 2})
		ok := b.server(t, mailsim.ServerOptions{Name: "mx.ok.cs.test"})
		ref := b.server(t, mailsim.ServerOptions{Name: "mx.ref.cs.test", Refuse: true})
		tp := b.server(t, mailsim.ServerOptions{Name: "mx.tp.cs.test", Tarpit: true})
		fl := b.server(t, mailsim.ServerOptions{Name: "mx.fl.cs.test", DropFirst: 2})
		b.w.AddDomain("cs.test", mailsim.Domain{Users: []string{"u0", "u2", "u4"}})
		combos := [][]*mailsim.Server{{ok}, {ref, ok}, {tp, ok}, {fl, ok}, {ref, tp}, {tp, fl}, {fl}, {ref, fl, ok}}
		var reqs []Request
		for i := range 400 {
			reqs = append(reqs, Request{Addr: "u" + strconv.Itoa(i) + "@cs.test", Domain: "cs.test", Hosts: hosts(combos[i%len(combos)]...)})
		}
		var closedAt time.Time
		var cmu sync.Mutex
		go func() {
			time.Sleep(time.Duration(round*40) * time.Millisecond)
			cmu.Lock()
			closedAt = time.Now()
			cmu.Unlock()
			b.p.Close()
		}()
		res := probeAll(t, b.p, reqs)
		cmu.Lock()
		ca := closedAt
		cmu.Unlock()
		if !ca.IsZero() {
			if d := time.Since(ca); d > time.Second {
				t.Errorf("round %d: ProbeAll returned %v after Close", round, d)
			}
		}
		for i, r := range res {
			if r.Verdict == Unknown && r.Err == nil && r.Reply.Code == 0 {
				t.Errorf("round %d: u%d unknown without reason", round, i)
			}
		}
	}
}

// slowSlots is a fleet whose slots take a while to be granted.
type slowSlots struct{ wait time.Duration }
type nopLease struct{}

func (nopLease) Valid() bool                         { return true }
func (nopLease) Release()                            {}
func (nopLease) Wanted(int) bool                     { return false }
func (nopLease) Wants() <-chan struct{}              { return nil }
func (s slowSlots) Freed(netip.Addr) <-chan struct{} { return nil }
func (s slowSlots) Acquire(ctx context.Context, _ netip.Addr, _, _ int) (Lease, error) {
	time.Sleep(s.wait)
	return nopLease{}, nil
}

// A session whose fleet slot is granted after Close does not dial.
func TestNoDialAfterCloseWhileTheSlotIsTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{MaxPerHost: 1})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.lease.test"})
	b.w.AddDomain("lease.test", mailsim.Domain{Users: []string{"u0"}})
	b.p.Share(slowSlots{wait: 200 * time.Millisecond}, nil)
	go func() { time.Sleep(50 * time.Millisecond); b.p.Close() }()
	r := b.p.Probe(context.Background(), Request{Addr: "u0@lease.test", Domain: "lease.test", Hosts: hosts(s)})
	time.Sleep(300 * time.Millisecond)
	t.Logf("%v (%v); dials %d, server sessions %d", r.Verdict, r.Err, b.p.Stats().Dials, s.Stats().Sessions)
	if d := b.p.Stats().Dials; d > 0 {
		t.Errorf("%d dial(s) after Close (the slot came 150 ms after it)", d)
	}
}
