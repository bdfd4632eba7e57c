package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/mailvet/mailvet/internal/netguard"
)

// Timeouts of one attempt (connect 5 s, whole attempt 10 s; docs/api.md, "Retries").
const (
	DialTimeout    = 5 * time.Second
	AttemptTimeout = 10 * time.Second
)

// MaxResponseHeaderBytes bounds the headers of a receiver's answer (docs/api.md, "Retries"); an
// answer with more is a transport failure. Go's default, 10 MiB, would let every receiver make
// each attempt in flight hold that much.
const MaxResponseHeaderBytes = 64 << 10

// ErrForbiddenAddress marks a dial refused because the address is not public. Such a failure is
// final: retrying would dial the same forbidden network. It is netguard's, shared with the SMTP
// prober.
var ErrForbiddenAddress = netguard.ErrForbiddenAddress

// CheckAddr returns nil when ip is a public unicast address a callback may be sent to. An
// IPv4-mapped IPv6 address is judged as the IPv4 address it carries. The classification lives in
// internal/netguard.
func CheckAddr(ip netip.Addr) error { return netguard.CheckAddr(ip) }

// ClientOptions configure NewClient.
type ClientOptions struct {
	// AllowPrivate lifts the address check (MAILVET_WEBHOOK_ALLOW_PRIVATE; tests only).
	AllowPrivate bool
	// DNSResolver is the host:port every look-up goes to (MAILVET_DNS_RESOLVER); empty means the
	// system resolver.
	DNSResolver string
	// RootCAs replaces the trusted roots; nil means the system pool, which Go builds on Linux
	// from SSL_CERT_FILE (read instead of the system's bundle file) and the certificate
	// directories, which SSL_CERT_DIR replaces (docs/operations.md).
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
		dialer.Control = netguard.Guard{}.Control
	}
	conns := o.MaxConnsPerHost
	if conns < 2 {
		conns = 2
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    DialTimeout,
		ResponseHeaderTimeout:  AttemptTimeout,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		MaxIdleConns:           4 * conns,
		MaxIdleConnsPerHost:    conns,
		IdleConnTimeout:        90 * time.Second,
		ForceAttemptHTTP2:      true,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
