package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/clientaddr"
)

// Sign-in throttling (docs/dashboard.md, "Sign-in throttling") is a progressive delay: each
// subject gets a few failed password attempts free, then every further attempt must wait, from the
// subject's last attempt, a delay that doubles with each failure up to a cap. The subjects are the
// account from one client address (an attacker's failures slow that address down on that account,
// not the owner elsewhere), the client address across accounts, and the account from every
// address (a guesser with many addresses), whose cap is short so that nobody can keep the owner
// out for long. Failures are forgotten a day after a subject's last attempt. A throttled attempt
// is refused whatever the password, with the same message for every email, so the throttle
// reveals nothing about which accounts exist.
type delayPolicy struct {
	free      int           // failures without a delay
	base, cap time.Duration // the first delay, doubled with each failure after it, and its bound
}

var (
	pairDelay    = delayPolicy{free: maxAccountFailures, base: 30 * time.Second, cap: 15 * time.Minute}
	addressDelay = delayPolicy{free: maxAddressFailures, base: 30 * time.Second, cap: 15 * time.Minute}
	accountDelay = delayPolicy{free: maxAddressFailures, base: 30 * time.Second, cap: time.Minute}
)

// wait is how long after its last attempt a subject with failures must wait.
func (p delayPolicy) wait(failures int) time.Duration {
	if failures < p.free {
		return 0
	}
	d := p.base
	for i := p.free; i < failures && d < p.cap; i++ {
		d *= 2
	}
	return min(d, p.cap)
}

const (
	maxAccountFailures = 5
	// An address may hold several people (an office behind NAT), so it gets more free failures.
	maxAddressFailures = 20
	// forgetFailures is how long after a subject's last attempt its failures are forgotten.
	forgetFailures = 24 * time.Hour

	// Sign-ups are counted per client address too: each new account is a free tier's worth of
	// verifications, so one address may not mint them without end. The count uses the same table
	// under its own subject, in fixed windows of a day.
	signupWindow      = 24 * time.Hour
	maxAddressSignups = 10
)

func accountSubject(email string) string {
	s := sha256.Sum256([]byte(foldEmail(email)))
	return "account:" + hex.EncodeToString(s[:])
}

// pairSubject is the account of email from one client address.
func pairSubject(email, address string) string {
	s := sha256.Sum256([]byte(foldEmail(email) + "\x00" + address))
	return "pair:" + hex.EncodeToString(s[:])
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

// clientAddr is the address of the client that sent r (internal/clientaddr).
var clientAddr = clientaddr.Of

// attempt is a password attempt's claim on the throttle: its subjects and, when it was refused,
// how long to wait before the next one may be made.
type attempt struct {
	acct, pair, addr string
	wait             time.Duration
	// delays are the subjects whose delay this attempt starts if its password is wrong: the
	// attempt brought their failures to their policy's free count. A wrong password then writes a
	// signin_throttled audit event for each (docs/security.md, "Audit log").
	delays []delayStart
}

// delayStart is a subject whose delay an attempt started, for its audit event.
type delayStart struct {
	subject string // "pair", "account" or "address"
	policy  delayPolicy
}

// detail is the audit event's text: which subject, after how many failures, and the delays.
func (d delayStart) detail() string {
	var who string
	switch d.subject {
	case "pair":
		who = "from one address on this account"
	case "account":
		who = "on this account from every address"
	default:
		who = "from one address across accounts"
	}
	return strconv.Itoa(d.policy.free) + " failed sign-ins " + who + ": each further attempt waits " +
		spelled(d.policy.base) + ", doubling up to " + spelled(d.policy.cap)
}

// spelled writes a whole number of minutes or seconds as a person reads it: "30 seconds",
// "1 minute", "15 minutes".
func spelled(d time.Duration) string {
	n, unit := int(d/time.Second), "second"
	if d >= time.Minute && d%time.Minute == 0 {
		n, unit = int(d/time.Minute), "minute"
	}
	if n != 1 {
		unit += "s"
	}
	return strconv.Itoa(n) + " " + unit
}

// claimAttempt counts a password attempt for email from r against its subjects before the
// password is checked, and reports blocked when a subject must still wait (delayPolicy): then
// nothing is counted, and at.wait says how long. Counting first, under each subject's row lock, is
// what bounds attempts sent at the same moment: a check followed by a count after the slow hash
// would let every concurrent attempt pass the check. An attempt that turns out right is refunded.
func (h *Handler) claimAttempt(ctx context.Context, r *http.Request, email string) (at attempt, blocked bool, err error) {
	addr := h.addressSubject(r)
	at = attempt{acct: accountSubject(email), pair: pairSubject(email, addr), addr: addr}
	now := h.now()
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		// Always the pair, then the account, then the address: concurrent claims lock rows in one
		// order.
		at.delays = nil
		for _, c := range []struct {
			subject, name string
			policy        delayPolicy
		}{{at.pair, "pair", pairDelay}, {at.acct, "account", accountDelay}, {at.addr, "address", addressDelay}} {
			wait, failures, err := countDelayed(ctx, tx, c.subject, c.policy, now)
			if err != nil {
				return err
			}
			if wait > 0 {
				at.wait, blocked, at.delays = wait, true, nil
				return errBlocked // roll back: a refused attempt counts against no subject
			}
			if failures == c.policy.free {
				at.delays = append(at.delays, delayStart{subject: c.name, policy: c.policy})
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

// countDelayed adds one failure to subject and makes now its last attempt, returning the
// subject's failures with it, unless the subject must still wait: then it changes nothing and
// returns how long is left. The check and the count are one statement, under the row's lock. A
// subject whose last attempt is older than forgetFailures starts again from one failure.
// window_start holds the last attempt.
func countDelayed(ctx context.Context, tx pgx.Tx, subject string, p delayPolicy, now time.Time) (time.Duration, int, error) {
	var counted int
	err := tx.QueryRow(ctx, `
		INSERT INTO dashboard_signin_failures AS f (subject, window_start, failures) VALUES ($1, $2, 1)
		ON CONFLICT (subject) DO UPDATE SET
			failures = CASE WHEN f.window_start <= $3 THEN 1 ELSE f.failures + 1 END,
			window_start = $2
		WHERE f.window_start <= $3 OR f.failures < $4
			OR f.window_start + make_interval(secs => least($6::float8, $5::float8 * power(2, f.failures - $4))) <= $2
		RETURNING failures`,
		subject, now, now.Add(-forgetFailures), p.free, p.base.Seconds(), p.cap.Seconds()).Scan(&counted)
	if err == nil {
		return 0, counted, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, err
	}
	var (
		failures int
		last     time.Time
	)
	if err := tx.QueryRow(ctx, `SELECT failures, window_start FROM dashboard_signin_failures WHERE subject = $1`, subject).
		Scan(&failures, &last); err != nil {
		return 0, 0, err
	}
	// At least a second, so that a refusal always names a wait.
	return max(last.Add(p.wait(failures)).Sub(now), time.Second), failures, nil
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

// clearOld deletes rows whose failures are forgotten and sign-up windows that ended, a batch at a
// time, so the table stays small without a job; outside any claim's transaction, which locks only
// its subjects' rows, in one order.
func (h *Handler) clearOld(ctx context.Context, now time.Time) error {
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject IN (
		SELECT subject FROM dashboard_signin_failures WHERE window_start < $1 LIMIT 100)`, now.Add(-max(forgetFailures, signupWindow)))
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
		WHERE subject = ANY($1) AND window_start > $2`, []string{at.pair, at.acct, at.addr}, h.now().Add(-forgetFailures))
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

// clearFailures forgets an account's failures, from every address and from this one, after it
// signed in; the address keeps its count.
func (h *Handler) clearFailures(ctx context.Context, at attempt) error {
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject = ANY($1)`, []string{at.acct, at.pair})
	return err
}

// throttledText is what a throttled form says: how long to wait, rounded up to what a person reads.
func throttledText(wait time.Duration) string {
	var when string
	switch {
	case wait <= time.Minute:
		secs := int((wait + time.Second - 1) / time.Second)
		when = strconv.Itoa(secs) + " seconds"
		if secs == 1 {
			when = "1 second"
		}
	default:
		mins := int((wait + time.Minute - 1) / time.Minute)
		when = strconv.Itoa(mins) + " minutes"
	}
	return "Too many failed sign-in attempts. Wait " + when + ", then try again."
}
