package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// Sign-in throttling (docs/dashboard.md, "Security model"): failures are counted per account
// (the email, known or not) and per client address in fixed windows. Past the limit, sign-in is
// refused for the rest of the window whatever the password, with the same message for every
// email, so the throttle reveals nothing about which accounts exist.
const (
	throttleWindow     = 15 * time.Minute
	maxAccountFailures = 5
	// An address may hold several people (an office behind NAT), so its limit is higher.
	maxAddressFailures = 20
)

func accountSubject(email string) string {
	s := sha256.Sum256([]byte(strings.ToLower(email)))
	return "account:" + hex.EncodeToString(s[:])
}

// addressSubject is the client's address (an IPv6 client's /64, which one host usually owns
// whole), as clientAddr finds it.
func (h *Handler) addressSubject(r *http.Request) string {
	a, ok := clientAddr(r, h.cfg.TrustedProxies)
	if !ok {
		return "ip:unknown"
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

// clientAddr is the address of the client that sent r. It is the connection's peer unless that
// peer is one of the trusted reverse proxies (MAILVET_TRUSTED_PROXIES): then it is the rightmost
// X-Forwarded-For entry that is not itself a trusted proxy. Entries left of that one are whatever
// the client wrote and are never believed; from an untrusted peer the header is ignored, since
// anyone could invent it. Without this, every sign-in behind a proxy would come from the proxy,
// and one person's failures would lock everyone out of the dashboard.
func clientAddr(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
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

// throttleFor returns the throttle subjects of a password attempt for email from r, and whether
// either is over its limit: the check every password form makes first.
func (h *Handler) throttleFor(ctx context.Context, r *http.Request, email string) (acct, addr string, blocked bool, err error) {
	acct, addr = accountSubject(email), h.addressSubject(r)
	blocked, err = h.throttled(ctx, acct, addr)
	return acct, addr, blocked, err
}

// passwordAttempt checks email's password; a wrong one is counted as a failure against both
// subjects.
func (h *Handler) passwordAttempt(ctx context.Context, email, password, acct, addr string) (userID string, ok bool, err error) {
	userID, ok, err = h.checkCredentials(ctx, email, password)
	if err != nil || ok {
		return userID, ok, err
	}
	return "", false, h.recordFailure(ctx, acct, addr)
}

// throttled says whether either subject is over its limit in the current window.
func (h *Handler) throttled(ctx context.Context, account, address string) (bool, error) {
	var blocked bool
	err := h.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM dashboard_signin_failures
			WHERE window_start > $3
			  AND ((subject = $1 AND failures >= $4) OR (subject = $2 AND failures >= $5)))`,
		account, address, h.now().Add(-throttleWindow), maxAccountFailures, maxAddressFailures).Scan(&blocked)
	return blocked, err
}

// recordFailure counts one failed sign-in against both subjects: a window older than
// throttleWindow starts over at one.
func (h *Handler) recordFailure(ctx context.Context, subjects ...string) error {
	now := h.now()
	for _, s := range subjects {
		_, err := h.pool.Exec(ctx, `
			INSERT INTO dashboard_signin_failures (subject, window_start, failures) VALUES ($1, $2, 1)
			ON CONFLICT (subject) DO UPDATE SET
				failures = CASE WHEN dashboard_signin_failures.window_start <= $3 THEN 1
				                ELSE dashboard_signin_failures.failures + 1 END,
				window_start = CASE WHEN dashboard_signin_failures.window_start <= $3 THEN $2
				                    ELSE dashboard_signin_failures.window_start END`,
			s, now, now.Add(-throttleWindow))
		if err != nil {
			return err
		}
	}
	// Old windows are cleared a batch at a time, so the table stays small without a job.
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject IN (
		SELECT subject FROM dashboard_signin_failures WHERE window_start < $1 LIMIT 100)`, now.Add(-24*time.Hour))
	return err
}

// clearFailures forgets an account's failures after it signed in; the address keeps its count.
func (h *Handler) clearFailures(ctx context.Context, account string) error {
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject = $1`, account)
	return err
}
