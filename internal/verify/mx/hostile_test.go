package mx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// hostileDNS serves DNS on one loopback port, over UDP and TCP, from answer, which fills in the
// reply to a question (the reply's Rcode is success unless it says otherwise). A UDP reply
// larger than the client's EDNS0 size is truncated (TC), as a real server's is, so that the
// client asks again over TCP; a nil reply is never sent. It returns the server's address and a
// count of the questions it was asked.
func hostileDNS(t *testing.T, answer func(q dns.Question, m *dns.Msg) bool) (string, *atomic.Int64) {
	t.Helper()
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for range 20 { // a UDP port whose TCP twin is free
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int64
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		m.Compress = true
		if len(r.Question) != 1 || !answer(r.Question[0], m) {
			return
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		_ = w.WriteMsg(m)
	})
	us := &dns.Server{PacketConn: pc, Handler: h}
	ts := &dns.Server{Listener: ln, Handler: h}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
	return pc.LocalAddr().String(), &queries
}

func rrHdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: dns.Fqdn(name), Rrtype: t, Class: dns.ClassINET, Ttl: 300}
}

// aRecords is n A records for name, 100.0.x.y: public, and all different.
func aRecords(name string, n int) []dns.RR {
	out := make([]dns.RR, n)
	for i := range out {
		out[i] = &dns.A{Hdr: rrHdr(name, dns.TypeA), A: net.IPv4(100, 0, byte(i>>8), byte(i)).To4()}
	}
	return out
}

// The MX look-up of a domain whose DNS is broken or hostile stays bounded: in the hosts and
// addresses it keeps (so in the queries it makes, the memory of its cache entry and the MX
// addresses the prober may try), and in time.
func TestHostileDNS(t *testing.T) {
	t.Parallel()
	addr, queries := hostileDNS(t, func(q dns.Question, m *dns.Msg) bool {
		name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
		switch {
		case name == "many-mx.test" && q.Qtype == dns.TypeMX:
			// Thousands of MX records (as many as a TCP answer holds), none with glue: each host
			// would be two more queries.
			for i := range 2000 {
				m.Answer = append(m.Answer, &dns.MX{Hdr: rrHdr(name, dns.TypeMX), Preference: uint16(2000 - i), Mx: fmt.Sprintf("mx%d.many-mx.test.", i)})
			}
		case strings.HasSuffix(name, ".many-mx.test") && q.Qtype == dns.TypeA:
			m.Answer = aRecords(name, 1)
		case name == "many-a.test" && q.Qtype == dns.TypeMX:
			m.Answer = []dns.RR{&dns.MX{Hdr: rrHdr(name, dns.TypeMX), Preference: 10, Mx: "mx.many-a.test."}}
		case name == "mx.many-a.test" && q.Qtype == dns.TypeA, name == "implicit-many-a.test" && q.Qtype == dns.TypeA:
			m.Answer = aRecords(name, 4000) // over TCP after a truncated UDP answer
		case name == "loop.test" && q.Qtype == dns.TypeMX:
			m.Answer = []dns.RR{&dns.MX{Hdr: rrHdr(name, dns.TypeMX), Preference: 10, Mx: "mx.loop.test."}}
		case name == "mx.loop.test":
			// A CNAME loop, answered as the chain that goes round (no address at its end).
			m.Answer = []dns.RR{
				&dns.CNAME{Hdr: rrHdr("mx.loop.test", dns.TypeCNAME), Target: "a.loop.test."},
				&dns.CNAME{Hdr: rrHdr("a.loop.test", dns.TypeCNAME), Target: "mx.loop.test."},
			}
		case name == "literal.test" && q.Qtype == dns.TypeMX:
			// An IP literal where a host name belongs: it is looked up as a name, never dialled
			// as the address it spells.
			m.Answer = []dns.RR{&dns.MX{Hdr: rrHdr(name, dns.TypeMX), Preference: 10, Mx: "192.0.2.1."}}
		case name == "192.0.2.1":
			m.Rcode = dns.RcodeNameError
		}
		return true
	})
	r := New(Config{Server: addr})
	for _, tc := range []struct {
		domain  string
		wantErr error
	}{
		{"many-mx.test", nil},
		{"many-a.test", nil},
		{"implicit-many-a.test", nil},
		{"loop.test", ErrNoMXAddress},
		{"literal.test", ErrNoMXAddress},
	} {
		t.Run(tc.domain, func(t *testing.T) {
			q0 := queries.Load()
			start := time.Now()
			res, err := r.Lookup(context.Background(), tc.domain)
			if took := time.Since(start); took > 600*time.Millisecond {
				t.Errorf("the look-up took %v, past its 500ms budget", took)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if len(res.Hosts) > MaxHosts {
				t.Errorf("%d hosts kept, want at most %d", len(res.Hosts), MaxHosts)
			}
			for _, h := range res.Hosts {
				if len(h.Addrs) > MaxAddrs {
					t.Errorf("%s: %d addresses kept, want at most %d", h.Name, len(h.Addrs), MaxAddrs)
				}
				if len(h.Addrs) == 0 {
					t.Errorf("%s: no address", h.Name)
				}
			}
			// The MX query (UDP, then TCP), and two per host kept at most (A, AAAA; each may be
			// truncated and asked again over TCP).
			if n := queries.Load() - q0; n > int64(2+4*MaxHosts) {
				t.Errorf("%d DNS queries for one look-up", n)
			}
		})
	}
	t.Run("many-mx.test keeps the most preferred", func(t *testing.T) {
		res, err := r.Lookup(context.Background(), "many-mx.test")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Hosts) == 0 || res.Hosts[0].Name != "mx1999.many-mx.test" || res.Hosts[0].Pref != 1 {
			t.Fatalf("hosts start %+v, want mx1999.many-mx.test (preference 1)", res.Hosts[:min(len(res.Hosts), 1)])
		}
	})
}

// A DNS server that truncates its UDP answer and then never answers over TCP costs the look-up
// its budget, no more: a temporary failure.
func TestTruncatedAnswerWithSilentTCP(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Skip("the UDP port's TCP twin is taken:", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accepts, reads, never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Read(make([]byte, 512))
				time.Sleep(5 * time.Second)
			}()
		}
	}()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Truncated = true
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	r := New(Config{Server: pc.LocalAddr().String(), Budget: 300 * time.Millisecond})
	start := time.Now()
	_, err = r.Lookup(context.Background(), "tcp-silent.test")
	if took := time.Since(start); took > 450*time.Millisecond {
		t.Errorf("the look-up took %v, past its 300ms budget", took)
	}
	if !errors.Is(err, ErrTemporary) {
		t.Fatalf("err = %v, want ErrTemporary", err)
	}
}
