// Package clientaddr finds the address of the client that sent a request, believing
// X-Forwarded-For only from the operator's reverse proxies (MAILVET_TRUSTED_PROXIES,
// docs/operations.md). The dashboard's sign-in throttling and the API's upload slots count by it.
package clientaddr

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Of is the address of the client that sent r. It is the connection's peer unless that
// peer is one of the trusted reverse proxies (MAILVET_TRUSTED_PROXIES): then it is the rightmost
// X-Forwarded-For entry that is not itself a trusted proxy. Entries left of that one are whatever
// the client wrote and are never believed; from an untrusted peer the header is ignored, since
// anyone could invent it. Without this, every sign-in behind a proxy would come from the proxy,
// and one client's failures would throttle, and one client's uploads would
// bound, every client behind the proxy.
func Of(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	peer = peer.Unmap()
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if !isTrusted(peer) {
		return peer, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return peer, true // a hop we cannot read: the last address we can vouch for
		}
		a = a.Unmap()
		if !isTrusted(a) {
			return a, true
		}
		peer = a
	}
	return peer, true
}
