package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// member is one verifier worker of the fleet: its own NATS connection, its own fleet handle, its
// own engine — a separate process as far as NATS and the mail servers can tell.
type member struct {
	nc *nats.Conn
	fl *fleet.Fleet
	v  *verify.Verifier
}

func join(t *testing.T, url string, w *mailsim.World, maxPerHost int, opts fleet.Options) *member {
	t.Helper()
	m := alone(t, w, maxPerHost)
	nc, err := queue.Connect(url, "fleet-test", queue.Auth{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fl, err := fleet.New(ctx, js, queue.Layout{Prefix: "fleettest"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	m.v.Join(verify.Fleet{Slots: fl.Slots, MX: fl.MX, CatchAll: fl.CatchAll})
	m.nc, m.fl = nc, fl
	t.Cleanup(func() {
		m.v.Close()
		fl.Close()
		nc.Close()
	})
	return m
}

// alone is a worker that shares nothing: its cap and caches are its own.
func alone(t *testing.T, w *mailsim.World, maxPerHost int) *member {
	t.Helper()
	v, err := verify.New(verify.Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: w.SMTPPort(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 1500 * time.Millisecond, MaxPerHost: maxPerHost, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return &member{v: v}
}

// capWorld is one MX address serving 12 domains of 80 addresses each, half of them unknown
// mailboxes, with 10 ms of round trip on every reply: enough work that one worker alone opens
// every session the cap allows.
func capWorld(t *testing.T) (*mailsim.World, *mailsim.Server, [][]string) {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{RTT: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	srv, err := w.AddServer(mailsim.ServerOptions{Name: "mx.shared.test"})
	if err != nil {
		t.Fatal(err)
	}
	// Three sets of addresses, one per worker, on the same domains.
	sets := make([][]string, 3)
	for d := range 12 {
		dom := fmt.Sprintf("d%d.cap.test", d)
		var users []string
		for i := range 40 {
			users = append(users, fmt.Sprintf("u%d", i))
		}
		w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.shared.test"}}, Users: users})
		// u0…u39 exist, u40…u79 do not: every set is about half unknown mailboxes.
		for i := range 80 {
			sets[i%3] = append(sets[i%3], fmt.Sprintf("u%d@%s", i, dom))
		}
	}
	return w, srv, sets
}

// wantStatus is the status capWorld's address must get: u0…u39 exist.
func wantStatus(addr string) verdict.Status {
	var n int
	var dom string
	fmt.Sscanf(addr, "u%d@%s", &n, &dom)
	if n < 40 {
		return verdict.StatusDeliverable
	}
	return verdict.StatusUndeliverable
}

func verifyAll(t *testing.T, v *verify.Verifier, addrs []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, r := range v.VerifyBatch(ctx, addrs, nil) {
		if want := wantStatus(addrs[i]); r.Status != want {
			t.Errorf("%s: %s (%s), want %s", addrs[i], r.Status, r.Reason, want)
		}
	}
}

// Three workers, each with its own NATS connection, verify at once against ONE mail server: the
// server never sees more sessions than MAILVET_SMTP_MAX_PER_HOST from the whole fleet. One
// worker of the fleet alone, on the same load, reaches the cap; and three workers that share
// nothing, on the same load, go past it — so it is the fleet's cap that holds them back.
func TestFleetSessionCap(t *testing.T) {
	const maxPerHost = 6
	url := natstest.URL(t)
	run := func(members []*member, sets [][]string) {
		var wg sync.WaitGroup
		for i, m := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				verifyAll(t, m.v, sets[i])
			}()
		}
		wg.Wait()
	}

	w, srv, sets := capWorld(t)
	run([]*member{join(t, url, w, maxPerHost, fleet.Options{})}, sets)
	one := srv.Stats()
	if one.PeakConcurrent != maxPerHost {
		t.Errorf("one worker: peak %d sessions, want the cap %d", one.PeakConcurrent, maxPerHost)
	}

	w, srv, sets = capWorld(t)
	run([]*member{join(t, url, w, maxPerHost, fleet.Options{}), join(t, url, w, maxPerHost, fleet.Options{}), join(t, url, w, maxPerHost, fleet.Options{})}, sets)
	three := srv.Stats()
	if three.PeakConcurrent > maxPerHost {
		t.Errorf("three workers: peak %d sessions, over the fleet's cap %d", three.PeakConcurrent, maxPerHost)
	}
	// A slot is held from before the dial until the server has answered QUIT, so the server,
	// which counts from accept to QUIT, may see one fewer than the slots taken at its peak.
	if three.PeakConcurrent < maxPerHost-1 {
		t.Errorf("three workers: peak %d sessions: the fleet left its cap %d unused", three.PeakConcurrent, maxPerHost)
	}

	w, srv, sets = capWorld(t)
	run([]*member{alone(t, w, maxPerHost), alone(t, w, maxPerHost), alone(t, w, maxPerHost)}, sets)
	apart := srv.Stats()
	if apart.PeakConcurrent <= maxPerHost {
		t.Errorf("three workers sharing nothing: peak %d sessions; the load does not test the cap %d", apart.PeakConcurrent, maxPerHost)
	}
	// Sharing the slots must not turn into passing sessions back and forth: the fleet opens about
	// as many sessions as workers that share nothing.
	if three.Sessions > apart.Sessions*3/2 {
		t.Errorf("three workers opened %d sessions, three sharing nothing %d: the fleet churns sessions", three.Sessions, apart.Sessions)
	}
	t.Logf("cap %d: one worker peak %d; three workers peak %d (%d sessions); three sharing nothing peak %d (%d sessions)",
		maxPerHost, one.PeakConcurrent, three.PeakConcurrent, three.Sessions, apart.PeakConcurrent, apart.Sessions)
}

// A domain one worker has looked up and probed for catch-all is neither looked up nor probed for
// catch-all again by the others: the MX answer and the catch-all answer come from the fleet.
func TestSharedKnowledge(t *testing.T) {
	url := natstest.URL(t)
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	users, err := w.AddServer(mailsim.ServerOptions{Name: "mx.users.test"})
	if err != nil {
		t.Fatal(err)
	}
	catchAll, err := w.AddServer(mailsim.ServerOptions{Name: "mx.catchall.test"})
	if err != nil {
		t.Fatal(err)
	}
	w.AddDomain("users.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.users.test"}}, Users: []string{"ann", "bob", "cat"}})
	w.AddDomain("catchall.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.catchall.test"}}, CatchAll: true})
	w.AddDomain("nomail.test", mailsim.Domain{Rcode: dns.RcodeNameError})

	members := []*member{join(t, url, w, 20, fleet.Options{}), join(t, url, w, 20, fleet.Options{}), join(t, url, w, 20, fleet.Options{})}
	check := func(m *member, addr string, want verdict.Status) {
		t.Helper()
		r := m.v.Verify(context.Background(), addr)
		if r.Status != want {
			t.Fatalf("%s: %s (%s), want %s", addr, r.Status, r.Reason, want)
		}
	}
	check(members[0], "ann@users.test", verdict.StatusDeliverable)
	check(members[0], "x@catchall.test", verdict.StatusCatchAll)
	check(members[0], "x@nomail.test", verdict.StatusInvalid)
	// The first worker shares its answers in the background: wait until the fleet has them.
	for _, key := range []string{"users.test", "catchall.test", "nomail.test"} {
		wait.For(t, 5*time.Second, "the fleet to hold the MX answer for "+key, func() bool { _, ok := members[0].fl.MX.Get(context.Background(), key); return ok })
	}
	for _, key := range []string{"users.test", "catchall.test"} {
		wait.For(t, 5*time.Second, "the fleet to hold the catch-all answer for "+key, func() bool { _, ok := members[0].fl.CatchAll.Get(context.Background(), key); return ok })
	}

	check(members[1], "bob@users.test", verdict.StatusDeliverable)
	check(members[1], "y@catchall.test", verdict.StatusCatchAll)
	check(members[1], "y@nomail.test", verdict.StatusInvalid)
	check(members[2], "cat@users.test", verdict.StatusDeliverable)
	check(members[2], "z@catchall.test", verdict.StatusCatchAll)
	check(members[2], "dan@users.test", verdict.StatusUndeliverable)

	for _, dom := range []string{"users.test", "catchall.test", "nomail.test"} {
		if n := w.DNSQueries(dom, dns.TypeMX); n != 1 {
			t.Errorf("%s: %d MX queries from the fleet, want 1", dom, n)
		}
	}
	// users.test: the first worker's address and its random-local-part probe, then one RCPT per
	// further address and no other probe. catchall.test: the first worker's two RCPTs, then none:
	// the others know every address there is accepted.
	if n := users.Stats().Rcpts; n != 2+3 {
		t.Errorf("users.test saw %d RCPTs, want 5 (one catch-all probe in the fleet)", n)
	}
	if n := catchAll.Stats().Rcpts; n != 2 {
		t.Errorf("catchall.test saw %d RCPTs, want 2 (one worker's address and its probe)", n)
	}
}

// The slots of a worker killed with its sessions open (no release, no renewal) come back by
// themselves one lease TTL after its last write.
func TestSlotsOfAKilledWorkerComeBack(t *testing.T) {
	const ttl = 2 * time.Second
	url := natstest.URL(t)
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ip := netip.MustParseAddr("192.0.2.25")
	dead, live := join(t, url, w, 3, fleet.Options{LeaseTTL: ttl}), join(t, url, w, 3, fleet.Options{LeaseTTL: ttl})

	ctx := context.Background()
	for open := range 3 {
		if _, err := dead.fl.Slots.Acquire(ctx, ip, 3, open); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := live.fl.Slots.Acquire(ctx, ip, 3, 0); !errors.Is(err, smtp.ErrNoSlot) {
		t.Fatalf("a fourth slot of three: %v, want ErrNoSlot", err)
	}
	killed := time.Now()
	dead.nc.Close() // kill -9: nothing is released, nothing renewed

	var got int
	for got < 3 {
		if time.Since(killed) > 3*ttl {
			t.Fatalf("only %d of 3 slots back %s after the kill (lease TTL %s)", got, time.Since(killed), ttl)
		}
		if _, err := live.fl.Slots.Acquire(ctx, ip, 3, got); err == nil {
			got++
			continue
		} else if !errors.Is(err, smtp.ErrNoSlot) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if back := time.Since(killed); back < ttl/2 {
		t.Errorf("slots back %s after the kill, before the lease TTL %s", back, ttl)
	}
	t.Logf("3 slots back %s after the kill (lease TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)
}

// A lease that is renewed stays valid past its TTL; one whose renewals fail (NATS gone) stops
// being valid two thirds of a TTL after its last write, before NATS could give it away.
func TestLeaseRenewalAndLapse(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	srv := natstest.Server(t)
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m := join(t, srv.ClientURL(), w, 2, fleet.Options{LeaseTTL: ttl})
	ip := netip.MustParseAddr("192.0.2.26")
	l, err := m.fl.Slots.Acquire(context.Background(), ip, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if !l.Valid() {
		t.Fatal("a renewed lease lapsed")
	}
	// The bucket still holds it: another worker finds only the other slot.
	other := join(t, srv.ClientURL(), w, 2, fleet.Options{LeaseTTL: ttl})
	if _, err := other.fl.Slots.Acquire(context.Background(), ip, 2, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := other.fl.Slots.Acquire(context.Background(), ip, 2, 1); !errors.Is(err, smtp.ErrNoSlot) {
		t.Fatalf("a renewed lease's slot was free: %v", err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	lost := time.Now()
	for l.Valid() {
		if time.Since(lost) > ttl {
			t.Fatalf("lease still valid %s after NATS went away (TTL %s)", time.Since(lost), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new session then opens without a lease, within the worker's fallback share (TestNATSUnreachable).
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.fl.Slots.Acquire(ctx, ip, 2, 0); err != nil {
		t.Fatalf("Acquire with NATS gone: %v, want a session without a lease", err)
	}
	if n := m.fl.Slots.Unleased(); n != 1 {
		t.Errorf("%d sessions without a lease, want 1", n)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Acquire with NATS gone took %s", d)
	}
}

// meet makes every member write to the bucket once and waits until each has seen all the others:
// the number of workers each counts for its fallback share.
func meet(t *testing.T, maxPerHost int, members ...*member) {
	t.Helper()
	ip := netip.MustParseAddr("192.0.2.30")
	want := max(1, maxPerHost/len(members))
	// A watch starts in the background: writes made before it has are not seen, so write until
	// every member has seen every other.
	wait.For(t, 5*time.Second, "every member to see every other's slots", func() bool {
		for _, m := range members {
			l, err := m.fl.Slots.Acquire(context.Background(), ip, len(members), 0)
			if err != nil {
				t.Fatal(err)
			}
			l.Release()
		}
		time.Sleep(20 * time.Millisecond)
		for _, m := range members {
			if m.fl.Slots.FallbackShare(maxPerHost) != want {
				return false
			}
		}
		return true
	})
}

// With NATS unreachable a worker neither hangs nor goes past its part of the cap, and its answers
// stay right: sessions open without leases, up to the cap divided among the workers it has seen
// using the bucket (3 here, so 2 of 6). The MX layer answers from DNS.
func TestNATSUnreachable(t *testing.T) {
	const maxPerHost = 6
	srv := natstest.Server(t)
	w, mx, sets := capWorld(t)
	m := join(t, srv.ClientURL(), w, maxPerHost, fleet.Options{})
	meet(t, maxPerHost, m, join(t, srv.ClientURL(), w, maxPerHost, fleet.Options{}), join(t, srv.ClientURL(), w, maxPerHost, fleet.Options{}))
	srv.Shutdown()
	srv.WaitForShutdown()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := m.v.Verify(ctx, "u1@d0.cap.test")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Verify with NATS down took %s", d)
	}
	if r.Status != verdict.StatusDeliverable || !r.MXFound {
		t.Errorf("with NATS down: %s (%s), mx_found %v; want deliverable", r.Status, r.Reason, r.MXFound)
	}

	// A load that takes every session the cap allows when NATS is up (TestFleetSessionCap).
	verifyAll(t, m.v, sets[0])
	st := mx.Stats()
	share := m.fl.Slots.FallbackShare(maxPerHost)
	if st.PeakConcurrent > int64(share) {
		t.Errorf("peak %d sessions without NATS, over the worker's fallback share %d", st.PeakConcurrent, share)
	}
	if st.PeakConcurrent < int64(share) {
		t.Errorf("peak %d sessions without NATS: the fallback share %d was not used", st.PeakConcurrent, share)
	}
	if held := m.fl.Slots.Held(); held != 0 {
		t.Errorf("%d leases held with NATS down", held)
	}
	t.Logf("NATS down: %d addresses verified in %s, peak %d sessions (fallback share %d of %d), %d sessions opened",
		len(sets[0])+1, time.Since(start).Round(time.Millisecond), st.PeakConcurrent, share, maxPerHost, st.Sessions)
}

// The fallback is counted per worker and per address, and ends with the outage: once the bucket
// answers again, new sessions take leases, and those opened without one stop being valid, so that
// they retire after their exchange.
func TestFallbackEndsWhenNATSReturns(t *testing.T) {
	const maxPerHost = 4
	url, proxy, w := proxiedNATS(t)
	cut := join(t, "nats://"+proxy.Addr(), w, maxPerHost, fleet.Options{})
	meet(t, maxPerHost, cut, join(t, url, w, maxPerHost, fleet.Options{}))
	slots := cut.fl.Slots

	proxy.Cut()
	wait.For(t, 5*time.Second, "the cut member to lose its connection", func() bool { return !cut.nc.IsConnected() })
	ip := netip.MustParseAddr("192.0.2.31")
	// As the pools ask: a slot not taken within half a second counts as unreachable.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var local []smtp.Lease
	for open := range 2 {
		l, err := slots.Acquire(ctx, ip, maxPerHost, open)
		if err != nil {
			t.Fatalf("session %d with NATS cut: %v, want one without a lease", open+1, err)
		}
		if !l.Valid() {
			t.Fatal("a session opened without a lease is not valid")
		}
		local = append(local, l)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("two sessions without NATS took %s to open", d)
	}
	if _, err := slots.Acquire(ctx, ip, maxPerHost, 2); !errors.Is(err, smtp.ErrNoSlot) {
		t.Errorf("a third session of a share of 2: %v, want ErrNoSlot", err)
	}
	// The count is the worker's, not the caller's: another pool of the same address is refused.
	if _, err := slots.Acquire(ctx, ip, maxPerHost, 0); !errors.Is(err, smtp.ErrNoSlot) {
		t.Errorf("a session past the share from a caller with none open: %v, want ErrNoSlot", err)
	}
	if n, held := slots.Unleased(), slots.Held(); n != 2 || held != 0 {
		t.Errorf("with NATS cut: %d sessions without a lease and %d leases, want 2 and 0", n, held)
	}
	local[1].Release()
	local[1].Release() // twice: counted once
	if n := slots.Unleased(); n != 1 {
		t.Errorf("%d sessions without a lease after one is released, want 1", n)
	}

	proxy.Restore()
	var leased smtp.Lease
	wait.For(t, 5*time.Second, "a slot lease once NATS is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		l, err := slots.Acquire(ctx, ip, maxPerHost, 1)
		if err != nil {
			return false
		}
		if slots.Held() == 0 {
			l.Release() // one more without a lease: NATS is not back yet
			return false
		}
		leased = l
		return true
	})
	if local[0].Valid() {
		t.Error("a session opened without a lease is still valid once the bucket answers again")
	}
	if !leased.Valid() {
		t.Error("the new lease is not valid")
	}
	local[0].Release()
	leased.Release()
	if n, held := slots.Unleased(), slots.Held(); n != 0 || held != 0 {
		t.Errorf("after every release: %d sessions without a lease and %d leases, want none", n, held)
	}
}

// A worker that stops gives its slots back at once, rather than a lease TTL later; and with NATS
// not answering, stopping takes no longer than its bound.
func TestCloseReleasesSlotsWithinABound(t *testing.T) {
	const maxPerHost = 3
	url, proxy, w := proxiedNATS(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("192.0.2.32")
	take := func(m *member) []smtp.Lease {
		t.Helper()
		var ls []smtp.Lease
		for open := range maxPerHost {
			l, err := m.fl.Slots.Acquire(ctx, ip, maxPerHost, open)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		return ls
	}

	leaving, other := join(t, url, w, maxPerHost, fleet.Options{}), join(t, url, w, maxPerHost, fleet.Options{})
	ls := take(leaving)
	start := time.Now()
	leaving.fl.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %s", d)
	}
	if ls[0].Valid() {
		t.Error("a lease is still valid after Close")
	}
	take(other) // every slot, at once: none waits for its TTL

	stuck := join(t, "nats://"+proxy.Addr(), w, maxPerHost, fleet.Options{})
	ip = netip.MustParseAddr("192.0.2.33")
	take(stuck)
	proxy.Hold() // NATS stops answering, without closing the connection
	start = time.Now()
	stuck.fl.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close with NATS not answering took %s", d)
	}
	proxy.Restore()
}

// A worker whose sessions to an address sit idle, holding every slot, gives them up as soon as
// another worker waits for the address, rather than at the idle timeout (5 s): the other's probe
// gets its answer within its budget.
func TestIdleSlotsGoToAWaitingWorker(t *testing.T) {
	const maxPerHost = 4
	url := natstest.URL(t)
	w, srv, sets := capWorld(t)
	holder, waiter := join(t, url, w, maxPerHost, fleet.Options{}), join(t, url, w, maxPerHost, fleet.Options{})
	// Only existing mailboxes, so that no session retires on its error budget: after the batch,
	// every session the holder opened sits idle with its slot.
	var deliverable []string
	for _, a := range sets[0] {
		if wantStatus(a) == verdict.StatusDeliverable {
			deliverable = append(deliverable, a)
		}
	}
	verifyAll(t, holder.v, deliverable)
	if held := holder.fl.Slots.Held(); held != maxPerHost {
		t.Fatalf("the first worker holds %d slots after its batch, want all %d (idle sessions)", held, maxPerHost)
	}
	start := time.Now()
	r := waiter.v.Verify(context.Background(), "u1@d0.cap.test")
	if r.Status != verdict.StatusDeliverable {
		t.Fatalf("the waiting worker's probe: %s (%s), want deliverable", r.Status, r.Reason)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the waiting worker's probe took %s", took)
	}
	if peak := srv.Stats().PeakConcurrent; peak > maxPerHost {
		t.Errorf("peak %d sessions over the cap %d", peak, maxPerHost)
	}
}

// proxiedNATS starts a NATS server, a proxy in front of it that the test can cut, and a mail
// world; it returns the server's URL (for members that stay connected) with the proxy and world,
// which end with the test.
func proxiedNATS(t *testing.T) (url string, proxy *tcpproxy.Proxy, w *mailsim.World) {
	t.Helper()
	url = natstest.URL(t)
	proxy, err := tcpproxy.Start(strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	w, err = mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return url, proxy, w
}

// An outage longer than a worker's memory of the others (four lease TTLs: a minute in
// production) does not make each worker think it is alone: the fallback share stays the cap
// divided among the workers seen before the bucket stopped answering, rather than growing to
// the whole cap on every worker, which would put the fleet at workers × cap while the buckets'
// stream is out and work still flows over the others.
func TestFallbackShareOutlastsWorkerMemory(t *testing.T) {
	const maxPerHost = 6
	const ttl = 300 * time.Millisecond
	srv := natstest.Server(t)
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	opts := fleet.Options{LeaseTTL: ttl}
	m := join(t, srv.ClientURL(), w, maxPerHost, opts)
	meet(t, maxPerHost, m, join(t, srv.ClientURL(), w, maxPerHost, opts), join(t, srv.ClientURL(), w, maxPerHost, opts))
	srv.Shutdown()
	srv.WaitForShutdown()

	ip := netip.MustParseAddr("192.0.2.34")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	l, err := m.fl.Slots.Acquire(ctx, ip, maxPerHost, 0)
	if err != nil {
		t.Fatalf("Acquire with NATS gone: %v, want a session without a lease", err)
	}
	defer l.Release()
	time.Sleep(3 * 4 * ttl) // three times the memory of the others, renewal ticks included
	if share := m.fl.Slots.FallbackShare(maxPerHost); share != maxPerHost/3 {
		t.Errorf("fallback share %d of %d after a long outage, want %d (three workers seen before it)", share, maxPerHost, maxPerHost/3)
	}
}

// A worker cut off from NATS without a word (a partition: its connection stays open and hears
// nothing) while it and another verify at one mail server: its leased sessions retire before
// their keys expire, the other worker takes the slots as they do, and the cut worker goes on
// within its fallback share. The server sees at most the cap plus that share, the documented
// bound for a partition (docs/fleet.md), and every answer is right.
func TestPartitionedWorkerStaysWithinTheDocumentedBound(t *testing.T) {
	const maxPerHost = 4
	const ttl = 600 * time.Millisecond
	url, proxy, _ := proxiedNATS(t)
	w, srv, sets := capWorld(t)
	opts := fleet.Options{LeaseTTL: ttl}
	cut := join(t, "nats://"+proxy.Addr(), w, maxPerHost, opts)
	other := join(t, url, w, maxPerHost, opts)
	meet(t, maxPerHost, cut, other)
	share := cut.fl.Slots.FallbackShare(maxPerHost)
	srv.ResetStats()

	var wg sync.WaitGroup
	for i, m := range []*member{cut, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verifyAll(t, m.v, slices.Concat(sets[i], sets[2])) // long enough to outlast the TTL
		}()
	}
	wait.For(t, 5*time.Second, "both workers to have sessions open", func() bool { return cut.fl.Slots.Held() > 0 && other.fl.Slots.Held() > 0 })
	proxy.Hold()
	held := time.Now()
	var unleased int // the most sessions the cut worker had open without a lease
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		case <-time.After(20 * time.Millisecond):
			unleased = max(unleased, cut.fl.Slots.Unleased())
		}
	}
	if unleased == 0 || time.Since(held) < ttl {
		t.Fatalf("the load ended %s after the partition, the cut worker with at most %d sessions without a lease: it does not test the partition", time.Since(held), unleased)
	}
	st := srv.Stats()
	if st.PeakConcurrent > maxPerHost+int64(share) {
		t.Errorf("peak %d sessions with one worker partitioned, over the cap %d plus its fallback share %d", st.PeakConcurrent, maxPerHost, share)
	}
	t.Logf("partition: peak %d sessions (cap %d, fallback share %d), %d sessions opened", st.PeakConcurrent, maxPerHost, share, st.Sessions)
	proxy.Restore()
}
