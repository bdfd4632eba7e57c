// Package netguard decides which IP addresses Mailvet may connect to on behalf of someone else:
// a webhook URL chosen by a customer, an MX host chosen by whoever controls a domain's DNS. Only
// public unicast addresses qualify; loopback, private (RFC 1918, unique-local), carrier-grade
// NAT, link-local (including the 169.254.169.254 cloud metadata service), multicast, reserved
// and unspecified space would let that someone reach into our own network (SSRF).
//
// The check belongs at dial time, on the address actually connected to, so that a name which
// resolves to a public address when it is looked up and to 127.0.0.1 when it is dialled (DNS
// rebinding) is still refused: Guard.Control is made for net.Dialer.Control.
package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// ErrForbiddenAddress marks an address that is not public unicast (and not explicitly allowed).
var ErrForbiddenAddress = errors.New("address is not a public unicast address")

// forbiddenPrefixes are the ranges refused besides those netip classifies itself (loopback,
// private, link-local, multicast, unspecified). Documentation and benchmark ranges are included
// because nothing legitimate listens there, and the NAT64, 6to4 and Teredo ranges because they
// embed an IPv4 address that could be private.
var forbiddenPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // carrier-grade NAT
		"169.254.0.0/16",  // link-local, including the 169.254.169.254 metadata service
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // reserved, including broadcast 255.255.255.255
		"64:ff9b::/96",    // NAT64
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard-only
		"2001::/32",       // Teredo
		"2001:2::/48",     // IPv6 benchmarking
		"2001:db8::/32",   // documentation
		"3fff::/20",       // documentation (the second IPv6 documentation prefix)
		"2002::/16",       // 6to4
		"fc00::/7",        // unique local
		"fec0::/10",       // deprecated site-local
		"::ffff:0:0/96",   // IPv4-mapped; unmapped below, listed for completeness
		"::/96",           // IPv4-compatible (deprecated)
		"::ffff:0:0:0/96", // IPv4-translated (RFC 2765 SIIT): ::ffff:0:a.b.c.d reaches a.b.c.d through a translator
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// globalUnicast6 is the IPv6 global unicast space. Everything else in IPv6 is reserved, local or
// multicast (and the prefixes above that lie inside it are refused on their own), so an IPv6
// address outside it is never public.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// normalize judges an IPv4-mapped IPv6 address as the IPv4 address it carries (::ffff:127.0.0.1
// reaches 127.0.0.1 on a dual-stack socket) and drops any zone.
func normalize(ip netip.Addr) netip.Addr { return ip.Unmap().WithZone("") }

// CheckAddr returns nil when ip is a public unicast address, ErrForbiddenAddress otherwise.
func CheckAddr(ip netip.Addr) error {
	if !ip.IsValid() {
		return ErrForbiddenAddress
	}
	ip = normalize(ip)
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
		return ErrForbiddenAddress
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return ErrForbiddenAddress
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(ip) {
			return ErrForbiddenAddress
		}
	}
	return nil
}

// ParsePrefixes parses a comma-separated list of CIDRs ("127.0.0.0/8, fd00::/8"); blanks are
// skipped. Each prefix is masked, so 127.0.0.1/8 means 127.0.0.0/8.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR like 127.0.0.0/8", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Guard is CheckAddr with exceptions: addresses inside Allow pass although private or reserved.
// The zero Guard allows public unicast addresses only.
type Guard struct {
	Allow []netip.Prefix
}

// Check returns nil when ip may be connected to, or an error wrapping ErrForbiddenAddress.
func (g Guard) Check(ip netip.Addr) error {
	if ip.IsValid() {
		n := normalize(ip)
		for _, p := range g.Allow {
			if p.Contains(n) {
				return nil
			}
		}
	}
	if err := CheckAddr(ip); err != nil {
		return fmt.Errorf("refused to connect to %s: %w", ip, err)
	}
	return nil
}

// Control is a net.Dialer Control function: it refuses the connection, before connect(2), when
// the socket's address is forbidden.
func (g Guard) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, ErrForbiddenAddress)
	}
	return g.Check(ap.Addr())
}
