package smtp

import (
	"net/netip"
	"time"
)

// A worker runs for weeks and meets millions of domains and MX addresses. What the prober learns
// about each (a pool's breaker, learnt limits and TLS needs; a domain's catch-all answer) is kept
// only while it is useful, so that its memory follows the traffic of the last minutes, not every
// address it has ever probed:
//
//   - a pool with no work, no session and nothing learnt still in force is forgotten once no
//     address has come to it for forgetAfter; the next address there starts afresh (one cautious
//     session first, as at any address never reached);
//   - a catch-all answer is forgotten once it has expired (CatchAllTTL), unless a probe is on
//     its way.
//
// Both sweeps run when a new entry is made, at most once per sweepEvery, under the lock that
// guards the map: no goroutine, and a cost amortised over the entries made.
const (
	forgetAfter = 15 * time.Minute
	sweepEvery  = time.Minute
)

// memory is when each map was last swept and the ages that apply; a test shortens them.
type memory struct {
	forgetAfter, sweepEvery time.Duration
	poolsSwept, caSwept     time.Time
}

// forgetPoolsLocked drops the pools that can be forgotten at now (pool.forgettableLocked),
// marking each retired so that an address looked up before the sweep goes to a new pool
// (Prober.enqueue). p.mu is held.
func (p *Prober) forgetPoolsLocked(now time.Time) {
	if now.Sub(p.mem.poolsSwept) < p.mem.sweepEvery {
		return
	}
	p.mem.poolsSwept = now
	for ip, pl := range p.pools {
		pl.mu.Lock()
		if pl.forgettableLocked(now, p.mem.forgetAfter) {
			pl.retired = true
			delete(p.pools, ip)
		}
		pl.mu.Unlock()
	}
}

// forgettableLocked reports whether nothing depends on pl any more at now: no address queued or
// probe to ask again, no session open, opening or on its way back, no breaker open, no learnt
// limit or fleet pause in force, and no address come here for idle. pl.mu is held.
func (pl *pool) forgettableLocked(now time.Time, idle time.Duration) bool {
	return len(pl.queue) == 0 && len(pl.probes) == 0 && pl.sessions == 0 && pl.opening == 0 &&
		len(pl.idle) == 0 && pl.returning == 0 && len(pl.live) == 0 &&
		!pl.openAt(now) && !now.Before(pl.limitTill) && !now.Before(pl.slotUntil) &&
		now.Sub(pl.used) >= idle
}

// forgetCatchAllLocked drops the catch-all answers expired at now with no probe on its way.
// p.caMu is held.
func (p *Prober) forgetCatchAllLocked(now time.Time) {
	if now.Sub(p.mem.caSwept) < p.mem.sweepEvery {
		return
	}
	p.mem.caSwept = now
	for d, st := range p.ca {
		if st.inflight == nil && (!st.known || !now.Before(st.expires)) {
			delete(p.ca, d)
		}
	}
}

// enqueue queues js at the pool of ip. A pool forgotten between its look-up and the queueing
// takes nothing (retired), and the look-up is made again: a new pool counts as idle until its
// first addresses come (pool.used), so a sweep may take it in that gap too.
func (p *Prober) enqueue(ip netip.Addr, js ...*job) {
	for !p.pool(ip).enqueue(js...) {
	}
}

// remembered returns the number of pools and of catch-all entries the prober keeps.
func (p *Prober) remembered() (pools, catchAll int) {
	p.mu.Lock()
	pools = len(p.pools)
	p.mu.Unlock()
	p.caMu.Lock()
	defer p.caMu.Unlock()
	return pools, len(p.ca)
}
