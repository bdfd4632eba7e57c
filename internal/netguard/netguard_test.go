package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/acceptor"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	// Classification only: nothing here is dialled.
	for _, tt := range []struct {
		ip     string
		public bool
	}{
		{"10.0.0.1", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"100.64.0.1", false},
		{"169.254.169.254", false},
		{"127.0.0.1", false},
		{"127.0.0.2", false},
		{"::1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:0:127.0.0.1", false}, // IPv4-translated
		{"::ffff:0:8.8.8.8", false},
		{"2001:db8::1", false},
		{"3fff::1", false},
		{"3fff:fff:ffff::1", false},
		{"2001:2::1", false},
		{"2001:2:0:ffff::1", false},
		{"2001:3::1", true},
		{"2606:4700:4700::1111", true},
		{"4000::1", false}, // outside the global unicast space 2000::/3: reserved
		{"1::1", false},
		{"e000::1", false},
		{"8.8.8.8", true},
		{"2001:4860:4860::8888", true},
		{"::ffff:8.8.8.8", true},
	} {
		ip := netip.MustParseAddr(tt.ip)
		err := CheckAddr(ip)
		if got := err == nil; got != tt.public {
			t.Errorf("CheckAddr(%s) public = %v, want %v", tt.ip, got, tt.public)
		}
		if err != nil && !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("CheckAddr(%s) = %v, not ErrForbiddenAddress", tt.ip, err)
		}
		if got := (Guard{}).Check(ip) == nil; got != tt.public {
			t.Errorf("Guard{}.Check(%s) public = %v, want %v", tt.ip, got, tt.public)
		}
	}
	if CheckAddr(netip.Addr{}) == nil || (Guard{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}).Check(netip.Addr{}) == nil {
		t.Error("the zero Addr passed")
	}
}

func TestGuardAllow(t *testing.T) {
	t.Parallel()
	allow, err := ParsePrefixes(" 127.0.0.1/8 , fd00::/8,")
	if err != nil {
		t.Fatal(err)
	}
	if len(allow) != 2 || allow[0] != netip.MustParsePrefix("127.0.0.0/8") {
		t.Fatalf("ParsePrefixes = %v", allow)
	}
	g := Guard{Allow: allow}
	for ip, ok := range map[string]bool{
		"127.0.0.2": true, "::ffff:127.0.0.9": true, "fd00::25": true, "8.8.8.8": true,
		"10.0.0.1": false, "169.254.169.254": false, "::1": false, "fc00::1": false,
	} {
		if got := g.Check(netip.MustParseAddr(ip)) == nil; got != ok {
			t.Errorf("Check(%s) allowed = %v, want %v", ip, got, ok)
		}
	}
	for _, bad := range []string{"127.0.0.1", "10.0.0.0/33", "loopback", "127.0.0.0/8;10.0.0.0/8"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted", bad)
		}
	}
}

// TestControlRefusesBeforeConnect shows that a dialer with Guard.Control never connects to a
// forbidden address: the listener accepts nothing.
func TestControlRefusesBeforeConnect(t *testing.T) {
	t.Parallel()
	ln := acceptor.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	d := &net.Dialer{Control: Guard{}.Control}
	if c, err := d.DialContext(ctx, "tcp", ln.Addr()); err == nil {
		c.Close()
		t.Fatal("dialled loopback")
	} else if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("err = %v, want ErrForbiddenAddress", err)
	}

	allowed := &net.Dialer{Control: Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}.Control}
	c, err := allowed.DialContext(ctx, "tcp", ln.Addr())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	c.Close()
	wait.Until(time.Second, func() bool { return ln.Accepted() > 0 }) // checked below, with the count
	if n := ln.Accepted(); n != 1 {
		t.Fatalf("listener accepted %d connections, want 1 (the allowed one)", n)
	}
}
