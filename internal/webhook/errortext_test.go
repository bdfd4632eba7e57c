package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
)

// The error text of an attempt is shown to the customer: it names the receiver's host and the
// bound that cut the attempt, never an address of Mailvet's own infrastructure (the resolver Go
// names in its DNS errors is the host's resolv.conf server).
func TestErrorTextNamesNoInternalAddress(t *testing.T) {
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: "https://hooks.example/x", Err: err} }
	for _, c := range []struct {
		err  error
		want string
	}{
		{wrap(&net.DNSError{Name: "xn--bcher-kva.example", Server: "10.255.255.53:53", Err: "no such host", IsNotFound: true}),
			"dns: xn--bcher-kva.example: no such host"},
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "slow.example", Server: "10.255.255.53:53", Err: "i/o timeout", IsTimeout: true}}),
			"dns: slow.example: the DNS lookup timed out"},
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}), "timeout: no connection within 5s"},
		{wrap(errors.New("net/http: TLS handshake timeout")), "timeout: TLS handshake not complete within 5s"},
		{wrap(context.DeadlineExceeded), "timeout: no complete answer within 10s"},
		// The address a private name resolved to stays out: the resolver may see internal DNS.
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 255, 255, 53), Port: 443},
			Err: fmt.Errorf("refused to connect to 10.255.255.53: %w", ErrForbiddenAddress)}),
			"refused: hooks.example resolves to an address that is not a public unicast address"},
	} {
		got := errorText(c.err, AttemptTimeout)
		if got != c.want {
			t.Errorf("errorText(%v) = %q, want %q", c.err, got, c.want)
		}
		if strings.Contains(got, "10.255.255.53") {
			t.Errorf("errorText(%v) names an internal address: %q", c.err, got)
		}
	}
}
