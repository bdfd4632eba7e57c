package smtp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/netguard"
	"github.com/mailvet/mailvet/internal/testkit/acceptor"
)

// recorder is a dialer that records what it is asked to dial and connects nowhere, so that tests
// about non-loopback addresses send no traffic.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) DialContext(_ context.Context, _, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.calls = append(r.calls, addr)
	r.mu.Unlock()
	return nil, errors.New("recorder: not connecting")
}

func (r *recorder) dialled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func newProber(t *testing.T, cfg Config) *Prober {
	t.Helper()
	cfg.Helo, cfg.MailFrom = "probe.mailvet.test", "verify@probe.mailvet.test"
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestForbiddenMXIsNotDialled: without MAILVET_SMTP_ALLOW_CIDRS a mailsim MX on 127.0.0.x is
// refused, no connection reaches it, and the verdict is unknown with ErrForbiddenAddress; with
// 127.0.0.0/8 allowed the same MX is probed as always.
func TestForbiddenMXIsNotDialled(t *testing.T) {
	t.Parallel()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	mx, err := w.AddServer(mailsim.ServerOptions{Name: "mx.loopback.test"})
	if err != nil {
		t.Fatal(err)
	}
	w.AddDomain("loopback.test", mailsim.Domain{Users: []string{"ann"}})
	req := Request{Addr: "ann@loopback.test", Domain: "loopback.test", Hosts: hosts(mx)}

	guarded := newProber(t, Config{Port: w.SMTPPort(), Timeout: time.Second})
	r := guarded.Probe(context.Background(), req)
	if r.Verdict != Unknown || !errors.Is(r.Err, ErrForbiddenAddress) || !errors.Is(r.Err, netguard.ErrForbiddenAddress) {
		t.Fatalf("forbidden MX: %v (%v), want unknown with ErrForbiddenAddress", r.Verdict, r.Err)
	}
	if r.Host != "mx.loopback.test" {
		t.Errorf("Host = %q, want the refused MX", r.Host)
	}
	// ProbeAll takes the same path.
	all := guarded.ProbeAll(context.Background(), []Request{req, req}, nil)
	for _, r := range all {
		if r.Verdict != Unknown || !errors.Is(r.Err, ErrForbiddenAddress) {
			t.Fatalf("ProbeAll: %v (%v)", r.Verdict, r.Err)
		}
	}
	if s := mx.Stats().Sessions; s != 0 {
		t.Fatalf("the mail server accepted %d connections from a prober that must not dial it", s)
	}
	if s := guarded.Stats().Sessions; s != 0 {
		t.Fatalf("the prober opened %d sessions", s)
	}

	allowed := newProber(t, Config{Port: w.SMTPPort(), Timeout: time.Second, AllowCIDRs: loopbackOnly})
	r = allowed.Probe(context.Background(), req)
	if r.Verdict != Deliverable || r.Err != nil {
		t.Fatalf("allowed MX: %v (%s, %v), want deliverable", r.Verdict, r.Reply, r.Err)
	}
	if mx.Stats().Sessions == 0 {
		t.Fatal("the allowed probe did not reach the mail server")
	}
}

// TestForbiddenHostIsSkipped: a domain with a forbidden MX and an allowed one is probed on the
// allowed one only.
func TestForbiddenHostIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, Config{AllowCIDRs: []netip.Prefix{}}) // nothing allowed yet
	mx := b.server(t, mailsim.ServerOptions{Name: "mx.mixed.test"})
	b.w.AddDomain("mixed.test", mailsim.Domain{Users: []string{"ann"}})
	p := newProber(t, Config{Port: b.w.SMTPPort(), Timeout: time.Second,
		AllowCIDRs: []netip.Prefix{netip.PrefixFrom(mx.Addr(), 32)}})
	r := p.Probe(context.Background(), Request{Addr: "ann@mixed.test", Domain: "mixed.test", Hosts: []Host{
		{Name: "metadata.mixed.test", Addrs: []netip.Addr{netip.MustParseAddr("169.254.169.254")}},
		{Name: "mx.mixed.test", Addrs: []netip.Addr{mx.Addr()}},
	}})
	if r.Verdict != Deliverable || r.Host != "mx.mixed.test" {
		t.Fatalf("%v on %q (%v), want deliverable on mx.mixed.test", r.Verdict, r.Host, r.Err)
	}
}

// TestDialTimeCheck shows that the check at dial time refuses on its own, whatever was decided
// when the request was queued: a pool for a forbidden address cannot open a session, and
// nothing is handed to the network dialer.
func TestDialTimeCheck(t *testing.T) {
	t.Parallel()
	ln := acceptor.Start(t)
	p := newProber(t, Config{Port: ln.Port(), Timeout: time.Second})

	// The real dialer: refused before connect, the listener sees nothing.
	if _, err := p.pool(netip.MustParseAddr("127.0.0.1")).open(); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("open 127.0.0.1: %v, want ErrForbiddenAddress", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := ln.Accepted(); n != 0 {
		t.Fatalf("listener accepted %d connections", n)
	}

	// A recording dialer behind the guard: forbidden addresses never reach it.
	rec := &recorder{}
	p.dialer.(*guardDialer).next = rec
	for _, ip := range []string{"10.0.0.1", "169.254.169.254", "100.64.0.1", "fc00::1", "::ffff:127.0.0.1"} {
		if _, err := p.pool(netip.MustParseAddr(ip)).open(); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("open %s: %v, want ErrForbiddenAddress", ip, err)
		}
	}
	if calls := rec.dialled(); len(calls) != 0 {
		t.Fatalf("forbidden addresses reached the dialer: %v", calls)
	}
}

// TestDNSRebinding: a name that resolves to a public address and then to loopback is refused at
// the dial where it is loopback. (The prober dials the IPs of the MX look-up, checked on every
// dial; this covers a name ever reaching the dialer, as it would with a proxy given host names.)
func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	var lookups atomic.Int64
	rec := &recorder{}
	d := &guardDialer{next: rec, lookup: func(context.Context, string) ([]netip.Addr, error) {
		if lookups.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("8.8.8.8")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}}
	ctx := context.Background()
	if _, err := d.DialContext(ctx, "tcp", "mx.rebind.test:25"); errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("first dial (public): %v", err)
	}
	if _, err := d.DialContext(ctx, "tcp", "mx.rebind.test:25"); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("second dial (loopback): %v, want ErrForbiddenAddress", err)
	}
	// The recorder only records: the public address was not really dialled. The checked IP is
	// passed on, never the name, so nothing downstream resolves it again.
	if calls := rec.dialled(); len(calls) != 1 || calls[0] != "8.8.8.8:25" {
		t.Fatalf("dialled %v, want only 8.8.8.8:25", calls)
	}
	// A name with any forbidden address is refused.
	mixed := &guardDialer{next: rec, lookup: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("10.0.0.1")}, nil
	}}
	if _, err := mixed.DialContext(ctx, "tcp", "mx.mixed.test:25"); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("mixed name: %v, want ErrForbiddenAddress", err)
	}
	if n := len(rec.dialled()); n != 1 {
		t.Fatalf("the mixed name reached the dialer")
	}
}

// TestForbiddenThroughProxy: with MAILVET_SMTP_PROXY, a forbidden MX address is refused before
// anything is sent to the proxy — by the prober and by its dialer, for an IP or a host name.
func TestForbiddenThroughProxy(t *testing.T) {
	t.Parallel()
	px := startSOCKS5(t)
	b := setup(t, 0, Config{Timeout: time.Second, Proxy: "socks5://" + px.ln.Addr().String(), AllowCIDRs: []netip.Prefix{}})
	mx := b.server(t, mailsim.ServerOptions{Name: "mx.proxied.test"})
	b.w.AddDomain("proxied.test", mailsim.Domain{Users: []string{"ann"}})

	r := b.p.Probe(context.Background(), Request{Addr: "ann@proxied.test", Domain: "proxied.test", Hosts: hosts(mx)})
	if r.Verdict != Unknown || !errors.Is(r.Err, ErrForbiddenAddress) {
		t.Fatalf("through the proxy: %v (%v), want unknown with ErrForbiddenAddress", r.Verdict, r.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	port := b.w.SMTPPort()
	for _, addr := range []string{
		netip.AddrPortFrom(mx.Addr(), uint16(port)).String(),
		net.JoinHostPort("localhost", "25"), // a host name is resolved and checked first
	} {
		if c, err := b.p.dialer.DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			t.Fatalf("dialled %s through the proxy", addr)
		} else if !errors.Is(err, ErrForbiddenAddress) {
			t.Fatalf("dial %s: %v, want ErrForbiddenAddress", addr, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := px.accepts.Load(); n != 0 {
		t.Fatalf("the proxy accepted %d connections", n)
	}
	if s := mx.Stats().Sessions; s != 0 {
		t.Fatalf("the mail server accepted %d connections", s)
	}
}
