package smtp

import "time"

// The circuit breaker of an MX address. One failed connection (refused, silent, closed before
// the banner) is often transient: the address is skipped for retryAfter only, then half-open —
// one session may try it while the addresses waiting for it queue behind that session. Every
// further failure in a row doubles the pause, up to downFor, so that a server that keeps refusing
// is skipped without a dial per address. A refusing 5xx banner is persistent at once.
const (
	retryAfter = 250 * time.Millisecond
	downFor    = 30 * time.Second
)

// breaker is the state of an MX address's circuit breaker, kept in its pool and guarded by the
// pool's mutex.
type breaker struct {
	downUntil time.Time // no session is opened before this
	downErr   error     // the failure that opened the breaker, the answer of addresses failed over
	failures  int       // failed connections in a row while no session was open
}

// openAt reports whether the breaker keeps every session away at now.
func (b *breaker) openAt(now time.Time) bool { return now.Before(b.downUntil) }

// reset closes the breaker: a session to the address has opened.
func (b *breaker) reset() { b.failures, b.downUntil = 0, time.Time{} }

// trip counts one more failure in a row and opens the breaker for the pause it earns, which it
// returns.
func (b *breaker) trip(err error) time.Duration {
	b.failures++
	pause := min(retryAfter<<min(b.failures-1, 10), downFor)
	if persistent(err) {
		b.failures, pause = max(b.failures, 8), downFor
	}
	b.downUntil, b.downErr = time.Now().Add(pause), err
	return pause
}

// waits reports whether j, sent to an address whose breaker is open, waits for the half-open
// try rather than going to its next MX (or being answered when it has none): only after a first
// failure, which may be transient, and only when this address is its last MX.
func (b *breaker) waits(j *job) bool { return b.failures == 1 && j.next == len(j.targets)-1 }

// admitLocked queues js, but while the breaker is open only the addresses that wait for the
// half-open try (waits); it returns the others, for the caller to fail over once pl.mu is
// released.
func (pl *pool) admitLocked(js []*job) (moved []*job) {
	if !pl.openAt(time.Now()) {
		for _, j := range js {
			j.at.Store(pl)
		}
		pl.queue = append(pl.queue, js...)
		return nil
	}
	for _, j := range js {
		if pl.waits(j) {
			j.at.Store(pl)
			pl.queue = append(pl.queue, j)
		} else {
			moved = append(moved, j)
		}
	}
	return moved
}

// tripLocked opens the breaker after a failed connection while no session was open here: nobody
// can reach this address. The waiting addresses go to their next MX (returned, for the caller to
// fail over once pl.mu is released); those without one wait for the half-open try after a first
// failure, which may be transient. dialed is when the failed dial began.
func (pl *pool) tripLocked(err error, dialed time.Time) (moved []*job) {
	pause := pl.trip(err)
	keep := pl.queue[:0:0]
	for _, j := range pl.queue {
		j.asked.Store(true) // a dial it waited for failed: the server was tried
		if j.unreachedSince.IsZero() {
			// The time an address spends on MX hosts that cannot be reached counts
			// against its budget from here (failover, expireQueued); waiting for a free
			// session of a host that works does not.
			j.unreachedSince = dialed
			if j.queued.After(dialed) {
				j.unreachedSince = j.queued
			}
			if pl.openedAt.After(j.unreachedSince) {
				j.unreachedSince = pl.openedAt // a dial that began while a session worked
			}
		}
		if pl.waits(j) && !j.finished.Load() {
			keep = append(keep, j)
		} else {
			moved = append(moved, j)
		}
	}
	pl.queue = keep
	pl.dropProbesLocked()
	time.AfterFunc(pause, pl.halfOpen)
	// The half-open try may still be dialling when the waiting addresses' budgets end:
	// they are answered then, not when the dial gives up.
	pl.watchLocked(keep)
	return moved
}

// expireQueued answers the queued addresses whose budget ended while they waited for this
// address to be reached: unknown, timeout — or ErrBusy, when the fleet had no slot of it free. Once a session is open here they wait for a working
// host, which is not counted against them.
func (pl *pool) expireQueued() {
	now := time.Now()
	var expired []*job
	pl.mu.Lock()
	if len(pl.live) > 0 {
		pl.mu.Unlock()
		return
	}
	keep := pl.queue[:0:0]
	for _, j := range pl.queue {
		switch {
		case j.finished.Load():
		case j.expired(now) || j.unreachable(now, pl.p.cfg.Timeout):
			expired = append(expired, j)
		default:
			keep = append(keep, j)
		}
	}
	pl.queue = keep
	pl.mu.Unlock()
	for _, j := range expired {
		r := j.budgetEnded(ErrTimeout)
		r.Host = j.host()
		j.finish(r)
	}
}

// halfOpen lets one session try the address again for the addresses waiting on it.
func (pl *pool) halfOpen() {
	pl.mu.Lock()
	pl.dispatchLocked()
	pl.mu.Unlock()
}
