package smtp

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// socks5 is a minimal SOCKS5 server (RFC 1928: no authentication, CONNECT to an IPv4 address)
// on loopback, enough to show that probes really travel through MAILVET_SMTP_PROXY.
type socks5 struct {
	ln       net.Listener
	accepts  atomic.Int64 // connections accepted from the prober
	connects atomic.Int64
	target   atomic.Value // the last CONNECT destination, "ip:port"
}

func startSOCKS5(t *testing.T) *socks5 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &socks5{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			go s.serve(c)
		}
	}()
	return s
}

func (s *socks5) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 5 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil { // no authentication
		return
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil || req[1] != 1 || req[3] != 1 { // CONNECT, IPv4
		_, _ = c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	addr := make([]byte, 6)
	if _, err := io.ReadFull(c, addr); err != nil {
		return
	}
	ip := netip.AddrFrom4([4]byte(addr[:4]))
	dst := netip.AddrPortFrom(ip, binary.BigEndian.Uint16(addr[4:])).String()
	up, err := net.Dial("tcp", dst)
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer up.Close()
	s.connects.Add(1)
	s.target.Store(dst)
	if _, err := c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

func TestProbeThroughSOCKS5Proxy(t *testing.T) {
	t.Parallel()
	px := startSOCKS5(t)
	b := setup(t, 0, Config{Timeout: 1500 * time.Millisecond, Proxy: "socks5://" + px.ln.Addr().String(), AllowCIDRs: loopbackOnly})
	mx := b.server(t, mailsim.ServerOptions{Name: "mx.proxied.test"})
	b.w.AddDomain("proxied.test", mailsim.Domain{Users: []string{"ann"}})

	ok := b.p.Probe(context.Background(), Request{Addr: "ann@proxied.test", Domain: "proxied.test", Hosts: hosts(mx)})
	if ok.Verdict != Deliverable {
		t.Fatalf("through the proxy: %v (%s, %v)", ok.Verdict, ok.Reply, ok.Err)
	}
	if px.connects.Load() == 0 {
		t.Fatal("the probe did not go through the SOCKS5 proxy")
	}
	if want := netip.AddrPortFrom(mx.Addr(), uint16(b.w.SMTPPort())).String(); px.target.Load() != want {
		t.Errorf("proxy connected to %v, want the MX address %s", px.target.Load(), want)
	}
}

func TestBadProxyURLIsRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"http://127.0.0.1:3128", "socks5://", "::not a url"} {
		if _, err := New(Config{Port: 25, Helo: "h.test", MailFrom: "v@h.test", Timeout: time.Second, Proxy: p}); err == nil {
			t.Errorf("New accepted proxy %q", p)
		}
	}
}
