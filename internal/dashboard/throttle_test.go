package dashboard

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// The delays double from 30 s after the free failures, up to each subject's cap.
func TestDelayPolicy(t *testing.T) {
	for _, c := range []struct {
		p        delayPolicy
		failures int
		want     time.Duration
	}{
		{pairDelay, 4, 0}, {pairDelay, 5, 30 * time.Second}, {pairDelay, 6, time.Minute}, {pairDelay, 9, 8 * time.Minute},
		{pairDelay, 10, 15 * time.Minute}, {pairDelay, 1000, 15 * time.Minute},
		{accountDelay, 19, 0}, {accountDelay, 20, 30 * time.Second}, {accountDelay, 500, time.Minute},
	} {
		if got := c.p.wait(c.failures); got != c.want {
			t.Errorf("%+v after %d failures: %v, want %v", c.p, c.failures, got, c.want)
		}
	}
	if got := throttledText(90 * time.Second); got != "Too many failed sign-in attempts. Wait 2 minutes, then try again." {
		t.Errorf("text %q", got)
	}
}

// Sign-in throttling is a progressive delay, not a lock anyone can renew: failures from one
// address make that address wait longer and longer on the account (doubling, capped), while the
// owner signing in from another address is held up at most a minute after the last failure,
// however long the attack goes on (docs/dashboard.md, "Sign-in throttling").
func TestSigninProgressiveDelay(t *testing.T) {
	f := newFixture(t, map[string]string{"MAILVET_TRUSTED_PROXIES": "127.0.0.0/8"})
	f.browser(t).signup("ann@example.com")
	var (
		mu    sync.Mutex
		clock = time.Now().Truncate(time.Microsecond) // as Postgres stores it
	)
	f.h.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	from := func(addr string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/dashboard/signin", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-For", addr)
		return r
	}
	attacker, owner := from("198.51.100.7"), from("203.0.113.5")
	fail := func(r *http.Request) (bool, time.Duration) {
		t.Helper()
		_, blocked, err := f.h.claimAttempt(t.Context(), r, "ann@example.com")
		if err != nil {
			t.Fatal(err)
		}
		if blocked {
			at, _, _ := f.h.claimAttempt(t.Context(), r, "ann@example.com")
			return true, at.wait
		}
		return false, 0
	}
	for i := range maxAccountFailures {
		if blocked, _ := fail(attacker); blocked {
			t.Fatalf("free failure %d blocked", i+1)
		}
	}
	// Each further attempt waits twice as long as the one before, up to 15 minutes.
	for i, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute} {
		blocked, wait := fail(attacker)
		if !blocked || wait != want {
			t.Fatalf("after %d failures: blocked %v for %v, want %v", maxAccountFailures+i, blocked, wait, want)
		}
		advance(wait - time.Second)
		if blocked, _ := fail(attacker); !blocked {
			t.Fatalf("after %d failures: an attempt a second early was let through", maxAccountFailures+i)
		}
		advance(time.Second)
		if blocked, _ := fail(attacker); blocked {
			t.Fatalf("after %d failures: still blocked once the delay is over", maxAccountFailures+i)
		}
	}
	// The owner, from another address, has only the account-wide delay, which is short: at most a
	// minute after the attacker's last failure, even after the attacker's 20 failures and more.
	for range 20 {
		advance(15 * time.Minute)
		fail(attacker)
	}
	if blocked, wait := fail(owner); blocked && wait > time.Minute {
		t.Fatalf("the owner waits %v", wait)
	}
	advance(time.Minute)
	if blocked, wait := fail(owner); blocked {
		t.Fatalf("the owner is still blocked %v a minute after the last failure", wait)
	}
	// A day without attempts forgets the failures.
	advance(forgetFailures + time.Second)
	for i := range maxAccountFailures {
		if blocked, _ := fail(attacker); blocked {
			t.Fatalf("a day later, failure %d blocked", i+1)
		}
	}
}
