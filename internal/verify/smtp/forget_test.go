package smtp

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// A worker's prober forgets the MX addresses nothing is happening at and the catch-all answers
// that have expired (forget.go), so that its memory does not grow with every domain it has ever
// verified; what is still in use or still in force is kept, and a forgotten address works again
// the next time.
func TestProberForgetsWhatIsNoLongerInUse(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 2 * time.Second, IdleTimeout: 30 * time.Millisecond})
	b.p.mem.forgetAfter, b.p.mem.sweepEvery = 100*time.Millisecond, 0
	srv := map[string]*mailsim.Server{}
	for _, d := range []string{"a", "b", "c"} {
		opts := mailsim.ServerOptions{Name: "mx." + d + ".test"}
		if d == "c" {
			opts.ReplyDelay = 300 * time.Millisecond // busy long enough to be swept around
		}
		srv["mx."+d+".test"] = b.server(t, opts)
		b.w.AddDomain(d+".test", mailsim.Domain{Users: []string{"ann"}})
	}
	probe := func(d string) {
		t.Helper()
		r := b.p.Probe(context.Background(), Request{Addr: "ann@" + d + ".test", Domain: d + ".test", Hosts: hosts(srv["mx."+d+".test"])})
		if r.Verdict != Deliverable {
			t.Fatalf("ann@%s.test: %v (%v), want deliverable", d, r.Verdict, r.Err)
		}
	}
	idle := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := 0
			b.p.OpenSessions(func(_ netip.Addr, k int) { n += k })
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions still open after their idle timeout", n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	probe("a")
	if pools, ca := b.p.remembered(); pools != 1 || ca != 1 {
		t.Fatalf("after one address: %d pools, %d catch-all entries; want 1 and 1", pools, ca)
	}
	// a.test's answer expires; its address has no session and nothing comes to it.
	b.p.caMu.Lock()
	b.p.ca["a.test"].expires = time.Now().Add(-time.Second)
	b.p.caMu.Unlock()
	idle()
	time.Sleep(150 * time.Millisecond)
	probe("b") // a new pool and a new answer: both sweeps run
	if pools, ca := b.p.remembered(); pools != 1 || ca != 1 {
		t.Fatalf("after a.test's address went quiet and its answer expired: %d pools, %d catch-all entries; want b.test's only", pools, ca)
	}
	// Still in force: b.test's answer (six hours), and an address a probe is working at.
	idle()
	b.p.mu.Lock()
	b.p.mem.forgetAfter = 0
	b.p.mu.Unlock()
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		r := b.p.Probe(context.Background(), Request{Addr: "ann@c.test", Domain: "c.test", Hosts: hosts(srv["mx.c.test"])})
		if r.Verdict != Deliverable {
			t.Errorf("ann@c.test: %v (%v), want deliverable", r.Verdict, r.Err)
		}
	}()
	for open := false; !open; {
		b.p.OpenSessions(func(ip netip.Addr, _ int) { open = open || ip == srv["mx.c.test"].Addr() })
		time.Sleep(time.Millisecond)
	}
	probe("a") // again: a fresh pool works, and the sweep passes c's busy one by
	if pools, ca := b.p.remembered(); pools != 2 || ca != 3 {
		t.Fatalf("with b.test quiet but its answer in force, and c.test's address busy: %d pools, %d catch-all entries; want 2 (c, a) and 3", pools, ca)
	}
	<-busy
}

// Many addresses at once on MX addresses that are forgotten as soon as they fall quiet: an
// address looked up just before its pool was forgotten goes to a new pool, never to the retired
// one, and every address gets its answer (run with -race).
func TestForgettingRacesNoAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 2 * time.Second, IdleTimeout: time.Millisecond, MaxPerHost: 2})
	b.p.mem.forgetAfter, b.p.mem.sweepEvery = 0, 0
	var servers []*mailsim.Server
	for i := range 12 {
		s := b.server(t, mailsim.ServerOptions{Name: fmt.Sprintf("mx.r%d.test", i)})
		servers = append(servers, s)
		b.w.AddDomain(fmt.Sprintf("r%d.test", i), mailsim.Domain{Users: []string{"ann"}})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 30 {
				i := (g*5 + k) % len(servers)
				d := fmt.Sprintf("r%d.test", i)
				local := "ann"
				want := Deliverable
				if k%3 == 0 {
					local, want = "nobody", Undeliverable
				}
				r := b.p.Probe(context.Background(), Request{Addr: local + "@" + d, Domain: d, Hosts: hosts(servers[i])})
				if r.Verdict != want {
					t.Errorf("%s@%s: %v (%v), want %v", local, d, r.Verdict, r.Err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The moment the race above can hit, made to happen: a pool looked up, then forgotten before an
// address is queued at it, takes nothing, and the address goes to a new pool for the same MX
// address, where it gets its answer.
func TestPoolForgottenBetweenLookUpAndQueueing(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{Timeout: 2 * time.Second})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.late.test"})
	b.w.AddDomain("late.test", mailsim.Domain{Users: []string{"ann"}})
	b.p.mu.Lock()
	b.p.mem.forgetAfter, b.p.mem.sweepEvery = 0, 0
	b.p.mu.Unlock()

	looked := b.p.pool(s.Addr())
	b.p.mu.Lock()
	b.p.forgetPoolsLocked(time.Now())
	b.p.mu.Unlock()
	if !looked.retired {
		t.Fatal("an unused pool with forgetAfter 0 was not forgotten")
	}
	if looked.enqueue(&job{addr: "ann@late.test", domain: "late.test"}) {
		t.Fatal("a retired pool took an address")
	}
	r := b.p.Probe(context.Background(), Request{Addr: "ann@late.test", Domain: "late.test", Hosts: hosts(s)})
	if r.Verdict != Deliverable {
		t.Fatalf("ann@late.test: %v (%v), want deliverable from a new pool", r.Verdict, r.Err)
	}
	if b.p.pool(s.Addr()) == looked {
		t.Fatal("the forgotten pool is still the MX address's")
	}
}
