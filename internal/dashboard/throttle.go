package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

	// Sign-ups are counted per client address too: each new account is a free tier's worth of
	// verifications, so one address may not mint them without end. The count uses the same table
	// under its own subject, in windows of a day.
	signupWindow      = 24 * time.Hour
	maxAddressSignups = 10
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

// attempt is a password attempt's claim on the throttle: its account and address subjects.
type attempt struct{ acct, addr string }

// claimAttempt counts a password attempt for email from r against both subjects before the
// password is checked, and reports blocked when either subject has no room left in its window:
// then nothing is counted. Counting first, under each subject's row lock, is what bounds
// attempts sent at the same moment: a check followed by a count after the slow hash would let
// every concurrent attempt pass the check. An attempt that turns out right is refunded.
func (h *Handler) claimAttempt(ctx context.Context, r *http.Request, email string) (at attempt, blocked bool, err error) {
	at = attempt{acct: accountSubject(email), addr: h.addressSubject(r)}
	now := h.now()
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		// Always the account first, then the address: concurrent claims lock rows in one order.
		for _, c := range []struct {
			subject string
			limit   int
		}{{at.acct, maxAccountFailures}, {at.addr, maxAddressFailures}} {
			full, err := count(ctx, tx, c.subject, c.limit, throttleWindow, now)
			if err != nil {
				return err
			}
			if full {
				blocked = true
				return errBlocked // roll back: a refused attempt counts against neither subject
			}
		}
		return nil
	})
	if blocked {
		return at, true, nil
	}
	if err != nil {
		return at, false, err
	}
	return at, false, h.clearOld(ctx, now)
}

// count adds one to subject's count in its current window (a new window when the last one is
// over) unless the window already holds limit: then it reports blocked and changes nothing.
func count(ctx context.Context, tx pgx.Tx, subject string, limit int, window time.Duration, now time.Time) (blocked bool, err error) {
	tag, err := tx.Exec(ctx, `
		INSERT INTO dashboard_signin_failures (subject, window_start, failures) VALUES ($1, $2, 1)
		ON CONFLICT (subject) DO UPDATE SET
			failures = CASE WHEN dashboard_signin_failures.window_start <= $3 THEN 1
			                ELSE dashboard_signin_failures.failures + 1 END,
			window_start = CASE WHEN dashboard_signin_failures.window_start <= $3 THEN $2
			                    ELSE dashboard_signin_failures.window_start END
		WHERE dashboard_signin_failures.window_start <= $3 OR dashboard_signin_failures.failures < $4`,
		subject, now, now.Add(-window), limit)
	return err == nil && tag.RowsAffected() == 0, err
}

// clearOld deletes windows that ended, a batch at a time, so the table stays small without a
// job; outside any claim's transaction, which locks only its subjects' rows, in one order.
func (h *Handler) clearOld(ctx context.Context, now time.Time) error {
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject IN (
		SELECT subject FROM dashboard_signin_failures WHERE window_start < $1 LIMIT 100)`, now.Add(-max(throttleWindow, signupWindow)))
	return err
}

// signupSubject is the sign-up count's subject for r's client address.
func (h *Handler) signupSubject(r *http.Request) string { return "signup:" + h.addressSubject(r) }

// claimSignup counts one new account against r's client address before it is created, so that
// sign-ups sent at the same moment are held to the limit too, and reports blocked when the
// address has made maxAddressSignups in its window. A sign-up that creates no account gives its
// count back (unclaimSignup).
func (h *Handler) claimSignup(ctx context.Context, r *http.Request) (blocked bool, err error) {
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		full, err := count(ctx, tx, h.signupSubject(r), maxAddressSignups, signupWindow, h.now())
		blocked = full
		return err
	})
	return blocked, err
}

// unclaimSignup gives back a sign-up's count when no account was made (the email was taken, or
// the write failed).
func (h *Handler) unclaimSignup(ctx context.Context, r *http.Request) error {
	_, err := h.pool.Exec(ctx, `UPDATE dashboard_signin_failures SET failures = greatest(failures - 1, 0)
		WHERE subject = $1 AND window_start > $2`, h.signupSubject(r), h.now().Add(-signupWindow))
	return err
}

var errBlocked = errors.New("sign-in throttled")

// refund takes back a claimed attempt that was not a failure: a right password, or a sign-up
// that created its account.
func (h *Handler) refund(ctx context.Context, at attempt) error {
	_, err := h.pool.Exec(ctx, `UPDATE dashboard_signin_failures SET failures = greatest(failures - 1, 0)
		WHERE subject = ANY($1) AND window_start > $2`, []string{at.acct, at.addr}, h.now().Add(-throttleWindow))
	return err
}

// passwordAttempt checks email's password under a claimed attempt: a wrong one stays counted
// against both subjects, a right one is refunded.
func (h *Handler) passwordAttempt(ctx context.Context, email, password string, at attempt) (userID string, ok bool, err error) {
	userID, ok, err = h.checkCredentials(ctx, email, password)
	if err != nil || !ok {
		return "", false, err
	}
	return userID, true, h.refund(ctx, at)
}

// clearFailures forgets an account's failures after it signed in; the address keeps its count.
func (h *Handler) clearFailures(ctx context.Context, account string) error {
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject = $1`, account)
	return err
}
