package mailsim

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// DNSStats count the queries the DNS server received.
type DNSStats struct {
	Queries int64 // every query, UDP and TCP
	TCP     int64 // queries over TCP
}

type dnsServer struct {
	w    *World
	addr string
	udp  *dns.Server
	tcp  *dns.Server

	queries, tcpQueries atomic.Int64
	mu                  sync.Mutex
	byName              map[string]int64 // "name type" ⇒ count
}

// startDNS listens on UDP and TCP on the same 127.0.0.1 port, so that a client can retry a
// truncated answer over TCP at the address it already has.
func startDNS(w *World) (*dnsServer, error) {
	d := &dnsServer{w: w, byName: map[string]int64{}}
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			lastErr = err
			continue
		}
		d.addr = pc.LocalAddr().String()
		d.udp = &dns.Server{PacketConn: pc, Handler: d}
		d.tcp = &dns.Server{Listener: l, Handler: d}
		for _, srv := range []*dns.Server{d.udp, d.tcp} {
			started := make(chan struct{})
			srv.NotifyStartedFunc = func() { close(started) }
			go srv.ActivateAndServe()
			<-started
		}
		return d, nil
	}
	return nil, fmt.Errorf("mailsim: no UDP+TCP port pair for DNS: %w", lastErr)
}

func (d *dnsServer) close() {
	d.udp.Shutdown()
	d.tcp.Shutdown()
}

func (d *dnsServer) resetStats() {
	d.queries.Store(0)
	d.tcpQueries.Store(0)
	d.mu.Lock()
	d.byName = map[string]int64{}
	d.mu.Unlock()
}

// DNSStats returns the DNS server's counters.
func (w *World) DNSStats() DNSStats {
	return DNSStats{Queries: w.dns.queries.Load(), TCP: w.dns.tcpQueries.Load()}
}

// DNSQueries is how many queries for name of type qtype (dns.TypeMX, …) the server received.
func (w *World) DNSQueries(name string, qtype uint16) int64 {
	w.dns.mu.Lock()
	defer w.dns.mu.Unlock()
	return w.dns.byName[key(name, qtype)]
}

func key(name string, qtype uint16) string {
	return strings.ToLower(dns.Fqdn(name)) + " " + dns.TypeToString[qtype]
}

func (d *dnsServer) ServeDNS(rw dns.ResponseWriter, req *dns.Msg) {
	tcp := rw.RemoteAddr().Network() == "tcp"
	d.queries.Add(1)
	if tcp {
		d.tcpQueries.Add(1)
	}
	if len(req.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		rw.WriteMsg(m)
		return
	}
	q := req.Question[0]
	d.mu.Lock()
	d.byName[key(q.Name, q.Qtype)]++
	d.mu.Unlock()

	m, delay, drop := d.answer(req, q, tcp)
	if drop {
		return
	}
	// A reply that waits must not hold up the server: miekg/dns runs each handler in its own
	// goroutine, so sleeping here delays only this answer.
	if delay += d.w.opts.RTT; delay > 0 {
		time.Sleep(delay)
	}
	rw.WriteMsg(m)
}

func (d *dnsServer) answer(req *dns.Msg, q dns.Question, tcp bool) (m *dns.Msg, delay time.Duration, drop bool) {
	m = new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	// owner is the name the records below answer for: the question's, or the end of its CNAME
	// chain, which a recursive resolver follows and answers with the whole chain in front.
	owner := q.Name
	for hops := 0; hops < maxCNAMEHops; hops++ {
		target, ok := d.w.cname(name)
		if !ok {
			break
		}
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr(owner, dns.TypeCNAME), Target: dns.Fqdn(target)})
		if q.Qtype == dns.TypeCNAME {
			return m, 0, false
		}
		name, owner = target, dns.Fqdn(target)
	}

	if dom := d.w.domain(name); dom != nil {
		if dom.Drop || (dom.DropAAAA && q.Qtype == dns.TypeAAAA) {
			return nil, 0, true
		}
		if dom.Rcode != 0 {
			m.Rcode = dom.Rcode
			return m, dom.Delay, false
		}
		if dom.UDPTrunc && !tcp {
			m.Truncated = true
			return m, dom.Delay, false
		}
		switch q.Qtype {
		case dns.TypeMX:
			if dom.NullMX {
				m.Answer = append(m.Answer, &dns.MX{Hdr: hdr(owner, dns.TypeMX), Preference: 0, Mx: "."})
			}
			for _, mx := range dom.MX {
				m.Answer = append(m.Answer, &dns.MX{Hdr: hdr(owner, dns.TypeMX), Preference: mx.Pref, Mx: dns.Fqdn(mx.Host)})
				if ip, ok := d.w.hostAddr(mx.Host); ok && !dom.NoGlue {
					m.Extra = append(m.Extra, &dns.A{Hdr: hdr(dns.Fqdn(mx.Host), dns.TypeA), A: ip.AsSlice()})
				}
			}
		case dns.TypeA:
			for _, a := range dom.A {
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(owner, dns.TypeA), A: net.ParseIP(a).To4()})
			}
		}
		return m, dom.Delay, false
	}
	if ip, ok := d.w.hostAddr(name); ok {
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(owner, dns.TypeA), A: ip.AsSlice()})
		}
		return m, 0, false
	}
	m.Rcode = dns.RcodeNameError
	return m, 0, false
}

// maxCNAMEHops bounds a CNAME chain, so that a loop of aliases still gets an answer.
const maxCNAMEHops = 8

func hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 3600}
}
