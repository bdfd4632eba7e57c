package mx

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// noAddressWorld has, for each domain, MX records whose one host has no address the prober can
// use, each for a different reason.
func noAddressWorld(t *testing.T) *mailsim.World {
	t.Helper()
	w := startWorld(t)
	mx := func(host string) mailsim.Domain { return mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: host}}} }
	// A answered NXDOMAIN while AAAA goes unanswered: not certain.
	w.AddDomain("a.test", mx("mx.a.test"))
	w.AddDomain("mx.a.test", mailsim.Domain{Rcode: dns.RcodeNameError, DropAAAA: true})
	// A CNAME'd host whose target fails with SERVFAIL: not certain.
	w.AddDomain("b.test", mx("mx.b.test"))
	w.AddCNAME("mx.b.test", "t.b.test")
	w.AddDomain("t.b.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	// A CNAME'd host whose target does not exist: certain.
	w.AddDomain("c.test", mx("mx.c.test"))
	w.AddCNAME("mx.c.test", "t.c.test")
	// The look-up's budget (500 ms) runs out while the host's addresses are asked for.
	slow := mx("mx.d.test")
	slow.Delay = 200 * time.Millisecond
	w.AddDomain("d.test", slow)
	w.AddDomain("mx.d.test", mailsim.Domain{Delay: 400 * time.Millisecond})
	// A host with only a private address: an answer (the prober's guard refuses it: mx_private).
	w.AddDomain("e.test", mx("mx.e.test"))
	w.AddDomain("mx.e.test", mailsim.Domain{A: []string{"10.0.0.1"}})
	// A host that does not exist: certain.
	w.AddDomain("f.test", mx("mx.gone.test"))
	return w
}

// ErrNoMXAddress only when the DNS said for certain that no MX host has an address: a host whose
// A query got NXDOMAIN while its AAAA query went unanswered, a CNAME'd host whose target fails
// with SERVFAIL, or a look-up whose budget ran out mid-way, are temporary; a CNAME into NXDOMAIN
// is certain; a host with only a private address is an answer. From a review of ErrNoMXAddress.
func TestNoMXAddressOnlyWhenCertain(t *testing.T) {
	t.Parallel()
	w := noAddressWorld(t)
	r := New(Config{Server: w.DNSAddr()})
	for d, want := range map[string]error{"a.test": ErrTemporary, "b.test": ErrTemporary, "c.test": ErrNoMXAddress,
		"d.test": ErrTemporary, "e.test": nil, "f.test": ErrNoMXAddress} {
		if _, err := r.Lookup(context.Background(), d); !errors.Is(err, want) {
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
	w := noAddressWorld(t)
	sh := mapShared{}
	if _, err := New(Config{Server: w.DNSAddr(), Shared: sh}).Lookup(context.Background(), "f.test"); !errors.Is(err, ErrNoMXAddress) {
		t.Fatalf("first worker: %v", err)
	}
	_, err := New(Config{Server: w.DNSAddr(), Shared: sh}).Lookup(context.Background(), "f.test")
	if !errors.Is(err, ErrNoMX) || !errors.Is(err, ErrNoMXAddress) {
		t.Errorf("second worker, from the fleet cache: %v, want ErrNoMXAddress (an ErrNoMX)", err)
	}
	old, _ := json.Marshal(sharedEntry{Hosts: []Host{{Name: "mx.gone.test"}}, Expires: time.Now().Add(time.Minute).UnixMilli()})
	sh["g.test"] = old
	if _, err := New(Config{Server: w.DNSAddr(), Shared: sh}).Lookup(context.Background(), "g.test"); !errors.Is(err, ErrNoMXAddress) {
		t.Errorf("an older worker's entry of hosts without addresses: %v, want ErrNoMXAddress", err)
	}
}
