package mx

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// beh is how fakeDNS answers one name and type: an rcode, records, a delay, or no answer at all.
type beh struct {
	rcode int
	drop  bool
	delay time.Duration
	rrs   []string
}

// fakeDNS is a DNS server on loopback that answers by "name/qtype" from table; unknown names get
// NXDOMAIN. It scripts what mailsim's world does not: per-type rcodes, silence, CNAMEs into errors.
func fakeDNS(t *testing.T, table map[string]beh) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		b, ok := table[q.Name+"/"+dns.TypeToString[q.Qtype]]
		if !ok {
			b = beh{rcode: dns.RcodeNameError}
		}
		if b.drop {
			return
		}
		time.Sleep(b.delay)
		m := new(dns.Msg)
		m.SetRcode(r, b.rcode)
		for _, s := range b.rrs {
			rr, err := dns.NewRR(s)
			if err != nil {
				panic(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// ErrNoMXAddress only when the DNS said for certain that no MX host has an address: a host whose
// A query got NXDOMAIN while its AAAA query went unanswered, a CNAME'd host whose target fails with
// SERVFAIL, or a look-up whose budget ran out mid-way, are temporary; a CNAME into NXDOMAIN is
// certain; a host with only a private address is an answer (the prober's guard refuses to dial it,
// mx_private). From a review of ErrNoMXAddress.
func TestNoMXAddressOnlyWhenCertain(t *testing.T) {
	t.Parallel()
	mx := func(d, h string) beh { return beh{rrs: []string{d + " 60 IN MX 10 " + h}} }
	table := map[string]beh{
		// A NXDOMAIN, AAAA silent
		"a.test./MX":      mx("a.test.", "mx.a.test."),
		"mx.a.test./A":    {rcode: dns.RcodeNameError},
		"mx.a.test./AAAA": {drop: true},
		// CNAME'd host whose target is SERVFAIL
		"b.test./MX":      mx("b.test.", "mx.b.test."),
		"mx.b.test./A":    {rcode: dns.RcodeServerFailure, rrs: []string{"mx.b.test. 60 IN CNAME t.b.test."}},
		"mx.b.test./AAAA": {rcode: dns.RcodeServerFailure, rrs: []string{"mx.b.test. 60 IN CNAME t.b.test."}},
		// CNAME'd host whose target is NXDOMAIN: certain
		"c.test./MX":      mx("c.test.", "mx.c.test."),
		"mx.c.test./A":    {rcode: dns.RcodeNameError, rrs: []string{"mx.c.test. 60 IN CNAME t.c.test."}},
		"mx.c.test./AAAA": {rcode: dns.RcodeNameError, rrs: []string{"mx.c.test. 60 IN CNAME t.c.test."}},
		// budget runs out mid-resolve: MX slow, A answers NODATA, AAAA after the budget
		"d.test./MX":      {delay: 200 * time.Millisecond, rrs: []string{"d.test. 60 IN MX 10 mx.d.test."}},
		"mx.d.test./A":    {},
		"mx.d.test./AAAA": {delay: 400 * time.Millisecond},
		// private-only host
		"e.test./MX":      mx("e.test.", "mx.e.test."),
		"mx.e.test./A":    {rrs: []string{"mx.e.test. 60 IN A 10.0.0.1"}},
		"mx.e.test./AAAA": {},
	}
	r := New(Config{Server: fakeDNS(t, table)})
	for d, want := range map[string]error{"a.test": ErrTemporary, "b.test": ErrTemporary, "c.test": ErrNoMXAddress, "d.test": ErrTemporary, "e.test": nil} {
		_, err := r.Lookup(context.Background(), d)
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", d, err, want)
		}
	}
}

// mapShared is a fleet cache in a map, for one goroutine.
type mapShared map[string][]byte

func (m mapShared) Get(_ context.Context, k string) ([]byte, bool) { b, ok := m[k]; return b, ok }
func (m mapShared) Put(k string, v []byte)                         { m[k] = v }

// An ErrNoMXAddress answer read back from the fleet's cache is still ErrNoMXAddress, and so is
// the entry a worker from before it shared: the hosts, without addresses, as an answer.
func TestSharedNoMXAddress(t *testing.T) {
	t.Parallel()
	table := map[string]beh{"f.test./MX": {rrs: []string{"f.test. 60 IN MX 10 mx.gone.test."}}}
	addr := fakeDNS(t, table)
	sh := mapShared{}
	if _, err := New(Config{Server: addr, Shared: sh}).Lookup(context.Background(), "f.test"); !errors.Is(err, ErrNoMXAddress) {
		t.Fatalf("first worker: %v", err)
	}
	_, err := New(Config{Server: addr, Shared: sh}).Lookup(context.Background(), "f.test")
	if !errors.Is(err, ErrNoMX) {
		t.Fatalf("second worker: %v", err)
	}
	if !errors.Is(err, ErrNoMXAddress) {
		t.Errorf("second worker, from the fleet cache: %v is ErrNoMX but not ErrNoMXAddress", err)
	}
	old, _ := json.Marshal(sharedEntry{Hosts: []Host{{Name: "mx.gone.test"}}, Expires: time.Now().Add(time.Minute).UnixMilli()})
	sh["g.test"] = old
	if _, err := New(Config{Server: addr, Shared: sh}).Lookup(context.Background(), "g.test"); !errors.Is(err, ErrNoMXAddress) {
		t.Errorf("an older worker's entry of hosts without addresses: %v, want ErrNoMXAddress", err)
	}
}
