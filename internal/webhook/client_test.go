package webhook

import (
	"net/http"
	"net/netip"
	"testing"
	"time"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip     string
		public bool
	}{
		{"93.184.216.34", true},
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"169.254.0.1", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"255.255.255.255", false},
		{"240.0.0.1", false},
		{"192.0.2.10", false},
		{"198.18.0.1", false},
		{"::", false},
		{"::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"ff02::1", false},
		{"64:ff9b::7f00:1", false},
		{"2002:7f00:1::", false},
		{"2001:db8::1", false},
	}
	for _, tt := range tests {
		ip := netip.MustParseAddr(tt.ip)
		if got := CheckAddr(ip) == nil; got != tt.public {
			t.Errorf("CheckAddr(%s) public = %v, want %v", tt.ip, got, tt.public)
		}
	}
	if CheckAddr(netip.Addr{}) == nil {
		t.Error("the zero Addr must be refused")
	}
}

// The client must not pick up HTTPS_PROXY and friends: a proxy would dial where the address
// check cannot see.
func TestClientIgnoresProxyAndRedirects(t *testing.T) {
	t.Parallel()
	c := NewClient(ClientOptions{})
	tr := c.Transport.(*http.Transport)
	if tr.Proxy != nil {
		t.Error("Transport.Proxy must be nil")
	}
	if c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("redirects must not be followed")
	}
	if tr.TLSHandshakeTimeout != DialTimeout || DialTimeout != 5*time.Second || AttemptTimeout != 10*time.Second {
		t.Error("timeouts differ from connect 5 s / attempt 10 s")
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n      int
		lo, hi time.Duration
	}{
		{1, 1000 * time.Millisecond, 1599 * time.Millisecond},
		{2, 2000 * time.Millisecond, 2599 * time.Millisecond},
		{3, 4000 * time.Millisecond, 4599 * time.Millisecond},
		{5, 16000 * time.Millisecond, 16599 * time.Millisecond},
		{6, 30000 * time.Millisecond, 30599 * time.Millisecond},
		{60, 30000 * time.Millisecond, 30599 * time.Millisecond},
	}
	for _, tt := range tests {
		for range 200 {
			if d := Backoff(tt.n); d < tt.lo || d > tt.hi || d%time.Millisecond != 0 {
				t.Fatalf("Backoff(%d) = %s, want a whole number of ms in [%s, %s]", tt.n, d, tt.lo, tt.hi)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, status        int
		transport, final bool
		want             outcome
	}{
		{1, 200, false, false, outcomeDelivered},
		{3, 204, false, false, outcomeDelivered},
		{1, 500, false, false, outcomeRetry},
		{2, 503, false, false, outcomeRetry},
		{3, 503, false, false, outcomeFailed},
		{1, 0, true, false, outcomeRetry},
		{3, 0, true, false, outcomeFailed},
		{1, 0, false, true, outcomeFailed},
		{1, 404, false, false, outcomeFailed},
		{1, 410, false, false, outcomeFailed},
		{1, 429, false, false, outcomeRetry},
		{2, 429, false, false, outcomeRetry},
		{3, 429, false, false, outcomeFailed},
		{1, 302, false, false, outcomeFailed},
		{1, 304, false, false, outcomeFailed},
	}
	for _, tt := range tests {
		if got := classify(tt.n, tt.status, tt.transport, tt.final); got != tt.want {
			t.Errorf("classify(%d, %d, %v, %v) = %v, want %v", tt.n, tt.status, tt.transport, tt.final, got, tt.want)
		}
	}
}
