package smtp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// One failed connection does not condemn an address: it is tried again after a short pause,
// by one session (half-open), and the address waiting for it is answered.
func TestBreakerTransient(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 1500 * time.Millisecond})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.flaky.test", DropFirst: 1})
	b.w.AddDomain("flaky.test", mailsim.Domain{Users: []string{"ann"}})
	start := time.Now()
	r := b.p.Probe(context.Background(), Request{Addr: "ann@flaky.test", Domain: "flaky.test", Hosts: hosts(s)})
	if took := time.Since(start); r.Verdict != Deliverable || took > time.Second {
		t.Fatalf("%v (%s, %v) after %v, want deliverable within a second", r.Verdict, r.Reply, r.Err, took)
	}
	if st := s.Stats(); st.Sessions != 2 {
		t.Errorf("%d connections, want 2 (the dropped one and the retry)", st.Sessions)
	}
}

// With a second MX, the address fails over at once; the first MX is used again for the next
// address within a second.
func TestBreakerTransientFailover(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	flaky := b.server(t, mailsim.ServerOptions{Name: "mx1.flaky2.test", DropFirst: 1})
	backup := b.server(t, mailsim.ServerOptions{Name: "mx2.flaky2.test"})
	b.w.AddDomain("flaky2.test", mailsim.Domain{Users: []string{"ann", "bob"}})
	r := b.p.Probe(context.Background(), Request{Addr: "ann@flaky2.test", Domain: "flaky2.test", Hosts: hosts(flaky, backup)})
	if r.Verdict != Deliverable || r.Host != backup.Name() {
		t.Fatalf("first: %v on %q (%v), want deliverable on the backup", r.Verdict, r.Host, r.Err)
	}
	time.Sleep(retryAfter + 50*time.Millisecond)
	r = b.p.Probe(context.Background(), Request{Addr: "bob@flaky2.test", Domain: "flaky2.test", Hosts: hosts(flaky, backup)})
	if r.Verdict != Deliverable || r.Host != flaky.Name() {
		t.Fatalf("second: %v on %q (%v), want deliverable on the first MX again", r.Verdict, r.Host, r.Err)
	}
}

// A server that keeps refusing is skipped without a dial per address, and its pause grows.
func TestBreakerPersistent(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{})
	dead := b.server(t, mailsim.ServerOptions{Name: "mx.dead.test", Refuse: true})
	b.w.AddDomain("dead.test", mailsim.Domain{Users: []string{"ann"}})
	var reqs []Request
	for i := range 50 {
		reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d@dead.test", i), Domain: "dead.test", Hosts: hosts(dead)})
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, r := range probeAll(t, b.p, reqs) {
			if r.Verdict != Unknown {
				t.Fatalf("%+v", r)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	// About 1.5 s of batches: a dial at 0, then after 250 ms and 500 ms pauses; never one per
	// address.
	if d := b.p.Stats().Dials; d > 4 {
		t.Errorf("%d dials to a refusing address, want ≤ 4", d)
	}
}

// An address that fails over, with most of its budget for unreachable hosts spent, into a pool
// whose breaker is open (failures == 1, its last MX) waits for the half-open try with a timer
// for what is left of its budget (it had none: 1.65 s on unreachable hosts for a 1 s budget).
func TestAddressFailingOverIntoAnOpenBreakerKeepsItsBudget(t *testing.T) {
	t.Parallel()
	const budget = time.Second
	p, err := New(Config{Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test", Timeout: budget, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.dialer = hangDialer{}
	pl := p.pool(netip.MustParseAddr("192.0.2.7"))
	pl.mu.Lock()
	pl.failures, pl.downUntil, pl.downErr = 1, time.Now().Add(retryAfter), errors.New("connection refused")
	pl.mu.Unlock()
	time.AfterFunc(retryAfter, pl.halfOpen) // as run() arms it when the breaker opens
	done := make(chan Result, 1)
	start := time.Now()
	j := &job{addr: "ann@x.test", domain: "x.test", targets: []target{{host: "mx", ip: pl.ip}},
		queued: start.Add(-900 * time.Millisecond), unreachedSince: start.Add(-900 * time.Millisecond)}
	j.finishFn = func(r Result) { done <- r }
	pl.enqueue(j) // as failover does, from a previous MX that could not be reached for 900 ms
	select {
	case r := <-done:
		spent := 900*time.Millisecond + time.Since(start)
		t.Logf("%v (%v): %v on unreachable hosts", r.Verdict, r.Err, spent)
		if spent > budget+150*time.Millisecond {
			t.Errorf("%v spent on unreachable hosts, budget %v", spent, budget)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("never answered")
	}
}
