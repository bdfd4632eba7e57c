package dashboard

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
)

// What the dashboard keeps for a bounded time goes when that time is over, whether or not anyone
// signs in afterwards (docs/personal-data.md): the sign-in throttle's counters a day after the
// last attempt (one of them holds the client address in the clear), expired sessions and mailed
// links, and upload tokens a day old. The clean-up on the way of a sign-in only runs when someone
// signs in; Sweep, run by every API replica, does not wait for one.
func TestSweepForgetsWhatOutlivedItsTime(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newFixture(t, nil, func(d *Deps) { d.Now = clock.Now })
	f.browser(t).signup("kim@example.com")
	b := f.browser(t)
	resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {"kim@example.com"}, "password": {"not the password"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	count := func(sql string) (n int) {
		t.Helper()
		pgtest.Must(t, f.pool.QueryRow(t.Context(), sql, clock.Now()).Scan(&n), sql)
		return n
	}
	ip := `SELECT count(*) FROM dashboard_signin_failures WHERE subject LIKE 'ip:%' AND $1::timestamptz IS NOT NULL`
	if count(ip) != 1 {
		t.Fatalf("the failed sign-in left %d client-address counters; want 1", count(ip))
	}
	pgtest.Exec(t, f.pool, `INSERT INTO dashboard_sessions (token_hash, user_id, csrf_secret, expires_at)
		SELECT sha256('old'), id, sha256('csrf'), now() - interval '1 hour' FROM dashboard_users LIMIT 1`)
	pgtest.Exec(t, f.pool, `INSERT INTO dashboard_email_tokens (token_hash, user_id, purpose, expires_at)
		SELECT sha256('old link'), id, 'reset', now() - interval '1 hour' FROM dashboard_users LIMIT 1`)
	pgtest.Exec(t, f.pool, `INSERT INTO dashboard_upload_tokens (account_id, token_hash, created_at)
		SELECT id, sha256('old form'), now() - interval '2 days' FROM accounts LIMIT 1`)

	// Two days with no sign-in: nothing else cleared them.
	clock.Add(48 * time.Hour)
	pgtest.Exec(t, f.pool, `INSERT INTO dashboard_sessions (token_hash, user_id, csrf_secret, expires_at)
		SELECT sha256('live'), id, sha256('csrf'), $1 FROM dashboard_users LIMIT 1`, clock.Now().Add(time.Hour))
	if _, body := f.browser(t).get("/dashboard/signin"); body == "" {
		t.Fatal("no sign-in page")
	}
	if count(ip) != 1 {
		t.Fatalf("precondition: %d client-address counters two days later", count(ip))
	}

	n, err := Sweep(t.Context(), f.pool, clock.Now())
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	for what, sql := range map[string]string{
		"sign-in counters":      `SELECT count(*) FROM dashboard_signin_failures WHERE window_start < $1`,
		"expired sessions":      `SELECT count(*) FROM dashboard_sessions WHERE expires_at < $1`,
		"expired mailed links":  `SELECT count(*) FROM dashboard_email_tokens WHERE expires_at < $1`,
		"day-old upload tokens": `SELECT count(*) FROM dashboard_upload_tokens WHERE created_at < $1::timestamptz - interval '1 day'`,
	} {
		if left := count(sql); left != 0 {
			t.Errorf("after Sweep, %d %s are left", left, what)
		}
	}
	if n < 6 { // ip:, account:, pair:, a session, a link, an upload token
		t.Errorf("Sweep reports %d rows; want at least 6", n)
	}
	// What is still within its time stays: a session that has an hour left.
	if count(`SELECT count(*) FROM dashboard_sessions WHERE expires_at > $1`) != 1 {
		t.Error("Sweep deleted a live session")
	}
}
