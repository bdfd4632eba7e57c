package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Timeouts of one attempt (connect 5 s, whole attempt 10 s; docs/api.md, "Retries").
const (
	DialTimeout    = 5 * time.Second
	AttemptTimeout = 10 * time.Second
)

// ErrForbiddenAddress marks a dial refused because the address is not public. Such a failure is
// final: retrying would dial the same forbidden network.
var ErrForbiddenAddress = errors.New("address is not a public unicast address")

// forbiddenPrefixes are the ranges no callback may reach besides those netip classifies itself
// (loopback, private, link-local, multicast, unspecified). Documentation and benchmark ranges are
// included because nothing legitimate listens there, and the NAT64, 6to4 and Teredo ranges
// because they embed an IPv4 address that could be private.
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
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4
		"fc00::/7",        // unique local
		"fec0::/10",       // deprecated site-local
		"::ffff:0:0/96",   // IPv4-mapped; unmapped below, listed for completeness
		"::/96",           // IPv4-compatible (deprecated)
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// CheckAddr returns nil when ip is a public unicast address a callback may be sent to. An
// IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
func CheckAddr(ip netip.Addr) error {
	if !ip.IsValid() {
		return ErrForbiddenAddress
	}
	if ip.Is4In6() {
		// ::ffff:127.0.0.1 reaches 127.0.0.1 on a dual-stack socket.
		ip = ip.Unmap()
	}
	ip = ip.WithZone("")
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
		return ErrForbiddenAddress
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(ip) {
			return ErrForbiddenAddress
		}
	}
	return nil
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// AllowPrivate lifts the address check (MAILVET_WEBHOOK_ALLOW_PRIVATE; tests only).
	AllowPrivate bool
	// DNSResolver is the host:port every look-up goes to (MAILVET_DNS_RESOLVER); empty means the
	// system resolver.
	DNSResolver string
	// RootCAs replaces the trusted roots; nil means the system pool, which Go builds from
	// SSL_CERT_FILE / SSL_CERT_DIR when they are set (note: they replace, not extend, the system
	// bundle, so point them at a bundle that contains everything to trust).
	RootCAs *x509.CertPool
	// MaxConnsPerHost bounds idle connections kept per host; it should match the concurrency.
	MaxConnsPerHost int
}

// NewClient returns the HTTP client deliveries go through. Its dialer checks every address it is
// about to connect to in the socket's Control hook, after resolution, so a name that resolves to
// a public address at request time and to 127.0.0.1 at dial time (DNS rebinding) is still
// refused. Proxies from the environment are ignored, because a proxy would dial on our behalf
// where the check cannot see. Redirects are never followed: a 3xx is the final answer.
func NewClient(o ClientOptions) *http.Client {
	resolver := net.DefaultResolver
	if o.DNSResolver != "" {
		addr := o.DNSResolver
		resolver = &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		}
	}
	dialer := &net.Dialer{
		Timeout:   DialTimeout,
		KeepAlive: 30 * time.Second,
		Resolver:  resolver,
	}
	if !o.AllowPrivate {
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: %w", address, ErrForbiddenAddress)
			}
			if err := CheckAddr(ap.Addr()); err != nil {
				return fmt.Errorf("refused to connect to %s: %w", ap.Addr(), err)
			}
			return nil
		}
	}
	conns := o.MaxConnsPerHost
	if conns < 2 {
		conns = 2
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   DialTimeout,
		ResponseHeaderTimeout: AttemptTimeout,
		MaxIdleConns:          4 * conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
