package smtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/proxy"

	"github.com/mailvet/mailvet/internal/netguard"
)

// guardDialer refuses, before anything is dialled, an address that is private or reserved and
// not in Config.AllowCIDRs (docs/architecture.md, "4. SMTP probe"). It wraps the direct dialer and
// the SOCKS5 proxy dialer alike, so that a forbidden MX address never reaches the proxy either;
// the direct dialer checks once more in its Control hook, on the socket's address.
type guardDialer struct {
	guard netguard.Guard
	next  proxy.ContextDialer
	// lookup resolves a host name; the prober always dials IP addresses, so this only serves a
	// name that ever reaches the dialer. Every address is checked, on every dial.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

func (d *guardDialer) check(ip netip.Addr) error {
	if err := d.guard.Check(ip); err != nil {
		return fmt.Errorf("%w: %w", ErrForbiddenAddress, err)
	}
	return nil
}

// DialContext checks addr's IP, or resolves addr's host name and checks every address it has,
// then dials the checked IP (never the name, so that nothing resolves it again).
func (d *guardDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := d.check(ip); err != nil {
			return nil, err
		}
		return d.next.DialContext(ctx, network, addr)
	}
	ips, err := d.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("smtp: %s has no address", host)
	}
	for _, ip := range ips {
		if err := d.check(ip); err != nil {
			return nil, err
		}
	}
	return d.next.DialContext(ctx, network, net.JoinHostPort(ips[0].Unmap().String(), port))
}

func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// forbidden reports whether err is a refusal of a private or reserved address.
func forbidden(err error) bool { return errors.Is(err, ErrForbiddenAddress) }
