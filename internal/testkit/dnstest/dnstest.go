// Package dnstest serves DNS on loopback for tests whose code resolves host names through a
// resolver it is given (the webhook client's, MAILVET_DNS_RESOLVER): a test's callback host name
// then reaches a receiver on loopback. The webhook package's tests and the API's and the webhook
// worker's end-to-end tests all need the same server, so it is written once here.
package dnstest

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// Loopback starts, for the test's lifetime, a DNS server on a loopback UDP port that answers
// every A question with 127.0.0.1 and every other question with nothing, and returns its address.
func Loopback(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET},
					A: net.IPv4(127, 0, 0, 1).To4()})
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}
