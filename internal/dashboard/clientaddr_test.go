package dashboard

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		trusted      []netip.Prefix
		want         string
	}{
		{"no proxies configured: the peer, whatever the header", "203.0.113.9:5000", []string{"198.51.100.1"}, nil, "203.0.113.9"},
		{"an untrusted peer's header is invented", "203.0.113.9:5000", []string{"198.51.100.1"}, proxies, "203.0.113.9"},
		{"a trusted proxy: the client it saw", "10.1.2.3:5000", []string{"198.51.100.1"}, proxies, "198.51.100.1"},
		{"the client's own entries left of it are not believed", "10.1.2.3:5000", []string{"1.1.1.1, 198.51.100.1"}, proxies, "198.51.100.1"},
		{"a chain of proxies is walked from the right", "127.0.0.1:5000", []string{"198.51.100.1, 10.9.9.9", "10.0.0.1"}, proxies, "198.51.100.1"},
		{"a trusted proxy without the header", "10.1.2.3:5000", nil, proxies, "10.1.2.3"},
		{"an unreadable hop: the last address vouched for", "10.1.2.3:5000", []string{"1.1.1.1, garbage, 10.0.0.7"}, proxies, "10.0.0.7"},
		{"IPv4-mapped addresses are unmapped", "[::ffff:10.1.2.3]:5000", []string{"::ffff:198.51.100.1"}, proxies, "198.51.100.1"},
	} {
		r, _ := http.NewRequest(http.MethodPost, "http://x/dashboard/signin", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		got, ok := clientAddr(r, tc.trusted)
		if !ok || got.String() != tc.want {
			t.Errorf("%s: %v %v, want %s", tc.name, got, ok, tc.want)
		}
	}
}

// Behind a trusted proxy, one client's failures throttle that client's address only: the others
// behind the same proxy can still sign in.
func TestSigninThrottleBehindAProxy(t *testing.T) {
	f := newFixture(t, map[string]string{"MAILVET_TRUSTED_PROXIES": "127.0.0.0/8"})
	f.browser(t).signup("ann@example.com")
	h := f.h
	from := func(xff string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/dashboard/signin", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-For", xff)
		return r
	}
	attacker, other := from("198.51.100.7"), from("203.0.113.5")
	if a, o := h.addressSubject(attacker), h.addressSubject(other); a == o || a != "ip:198.51.100.7" {
		t.Fatalf("subjects %q and %q", a, o)
	}
	// The attacker tries many accounts, so that only its address's limit is reached.
	for i := range maxAddressFailures {
		if _, blocked, err := h.claimAttempt(t.Context(), attacker, fmt.Sprintf("user%d@example.com", i)); err != nil || blocked {
			t.Fatalf("attempt %d: blocked %v, err %v", i+1, blocked, err)
		}
	}
	if _, blocked, err := h.claimAttempt(t.Context(), attacker, "ann@example.com"); err != nil || !blocked {
		t.Fatalf("the failing client is not throttled: %v %v", blocked, err)
	}
	if _, blocked, err := h.claimAttempt(t.Context(), other, "ann@example.com"); err != nil || blocked {
		t.Fatalf("another client behind the same proxy is throttled: %v %v", blocked, err)
	}
}
