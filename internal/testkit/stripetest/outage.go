package stripetest

import (
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// Proxied is stripe-mock behind a tcpproxy, for outage tests: point MAILVET_STRIPE_API_BASE at
// "http://" + the proxy's Addr, then play an Outage on it.
func Proxied(t testing.TB) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(strings.TrimPrefix(URL(t), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Outage is one way Stripe can be down, and how soon a caller must have given up on it.
type Outage struct {
	Name   string
	Start  func()
	Within time.Duration
}

// Outages are the two ways of p: black-holed (connections accepted, nothing answered), which a
// caller must give up on within its callTimeout (billing.CallTimeout) and a little; and refusing
// connections, which it must report at once.
func Outages(p *tcpproxy.Proxy, callTimeout time.Duration) []Outage {
	return []Outage{
		{"black-holed", p.Hold, callTimeout + 2*time.Second},
		{"refused", p.Cut, 2 * time.Second},
	}
}
