package smtp

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// What several probers — the verifier fleet — share, when they are given it (docs/fleet.md):
// the per-MX-address session cap, and what each has learnt about domains' catch-all behaviour.
// A prober without them keeps both to itself, as the `check` command does.

// ErrNoSlot is Slots.Acquire's answer when every slot of the MX address is taken.
var ErrNoSlot = errors.New("smtp: every session slot of the MX address is taken")

// Slots bounds the sessions that all the probers sharing it open to one MX address together.
type Slots interface {
	// Acquire takes one of max slots of the MX address ip for one session; open is the number of
	// sessions this prober already has open (or opening) there. It answers ErrNoSlot when all
	// are taken — or when other probers are waiting for the address and this one already has
	// its share — and another error when the limiter cannot answer; either way no session is
	// opened, and the pool asks again a little later. A limiter that cannot reach its store
	// (NATS unreachable) may still grant a lease it keeps locally, within a smaller share of
	// max (docs/fleet.md, "When NATS cannot be reached").
	Acquire(ctx context.Context, ip netip.Addr, max, open int) (Lease, error)
	// Freed returns a channel that is closed when a slot of ip may have come free (a session of
	// any prober sharing the limit has ended). Take it before Acquire, so that no release between
	// a failed Acquire and the wait is missed.
	Freed(ip netip.Addr) <-chan struct{}
}

// Lease is one taken slot. A session holds it from before it dials until after its connection is
// closed.
type Lease interface {
	// Valid reports whether the slot is still this session's for long enough to do one more
	// exchange. A lease whose renewals fail (NATS unreachable) stops being valid well before the
	// fleet could give its slot to someone else, and a lease granted locally while NATS was
	// unreachable stops being valid once it is reachable again; the session then retires.
	Valid() bool
	// Release gives the slot back.
	Release()
	// Wanted reports whether this session should give its slot up, after the exchange it has
	// finished, to another prober of the fleet that is waiting for a slot of this address. open
	// is the number of sessions this prober has open to the address: only a prober with more
	// than its share of the slots gives one up, and only one per wait, so that the fleet settles
	// on a fair split instead of passing sessions back and forth.
	Wanted(open int) bool
	// Wants returns a channel that is closed when another prober waits for a slot of this
	// address (already closed when one has just waited): an idle session then closes at once
	// rather than at the idle timeout.
	Wants() <-chan struct{}
}

// Shared is a store of answers that the probers sharing it read and write by key.
type Shared interface {
	// Get returns the value stored under key, if any, within ctx.
	Get(ctx context.Context, key string) ([]byte, bool)
	// Put stores value under key without making the caller wait for it.
	Put(key string, value []byte)
}

// slotWait bounds one Acquire: a limiter that does not answer in time counts as unreachable.
const slotWait = 500 * time.Millisecond

// slotYield is how long a pool that has just given a slot up to a waiting worker opens no new
// session to the address, so that the waiter gets the slot.
const slotYield = 100 * time.Millisecond

// Retry pauses after a failed Acquire: they double from slotRetryMin up to slotRetryMax, with
// jitter so that the workers waiting for one address do not all ask at once. A pool waits for the
// pause or for a slot of its address to be released (Freed), whichever comes first: the pause
// only matters when a slot comes back without a release, as when its holder died.
const (
	slotRetryMin = 20 * time.Millisecond
	slotRetryMax = time.Second
)

// lease takes a fleet slot for a session the pool is about to open. When there is none, it undoes
// the session's count, holds the pool's new sessions back for a pause and reports false: the
// queue waits for the sessions already open, or for the next try.
func (pl *pool) lease() (Lease, bool) {
	slots := pl.p.cfg.Slots
	if slots == nil {
		return nil, true
	}
	freed := slots.Freed(pl.ip)
	pl.mu.Lock()
	open := pl.sessions - 1 // the others: this one is counted already
	pl.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), slotWait)
	l, err := slots.Acquire(ctx, pl.ip, pl.p.cfg.MaxPerHost, open)
	cancel()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if err == nil {
		pl.slotRetry = 0
		return l, true
	}
	pl.opening--
	pl.sessions--
	pl.slotRetry = min(max(2*pl.slotRetry, slotRetryMin), slotRetryMax)
	pause := pl.slotRetry/2 + rand.N(pl.slotRetry/2+1)
	pl.slotUntil = time.Now().Add(pause)
	go pl.awaitSlot(freed, pause)
	return nil, false
}

// busy reports whether every session the address may have is in use, so that an address waiting
// here is not put to the server (docs/fleet.md, "Waiting for a slot"): the fleet has just had no
// slot of it free, or this pool has given one up to a waiting worker, or the pool has as many
// working sessions as it may (MaxPerHost, or the per-client limit the server showed). A pool
// whose only sessions are being opened, or are stalled on a slow reply, is waiting for the
// server instead.
func (pl *pool) busy() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := time.Now()
	if pl.slotRetry > 0 || now.Before(pl.slotUntil) {
		return true
	}
	limit := pl.p.cfg.MaxPerHost
	if pl.limit > 0 && now.Before(pl.limitTill) {
		limit = pl.limit
	}
	return len(pl.live) > 0 && pl.sessions >= limit
}

// awaitSlot lets the pool open sessions again after pause, or as soon as freed is closed.
func (pl *pool) awaitSlot(freed <-chan struct{}, pause time.Duration) {
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	case <-pl.p.closing:
		return
	}
	pl.mu.Lock()
	pl.slotUntil = time.Time{}
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// release gives back the lease of a session that has ended.
func release(l Lease) {
	if l != nil {
		l.Release()
	}
}

// catchAllEntry is a catch-all answer as the fleet shares it.
type catchAllEntry struct {
	CatchAll bool  `json:"catch_all"`
	Expires  int64 `json:"expires"` // Unix milliseconds
}

// sharedWait bounds the look-up of shared catch-all answers before a probe.
const sharedWait = 200 * time.Millisecond

// loadCatchAll asks the shared store for the catch-all answers of the domains of reqs that this
// prober does not know, in parallel, and remembers those it gets: an address of a domain another
// worker found catch-all is then answered without a session, and one of a domain found not
// catch-all needs no random-local-part RCPT.
func (p *Prober) loadCatchAll(ctx context.Context, reqs []Request) {
	shared := p.cfg.CatchAll
	if shared == nil {
		return
	}
	var domains []string
	seen := map[string]bool{}
	p.caMu.Lock()
	now := time.Now()
	for _, req := range reqs {
		d := strings.ToLower(req.Domain)
		if seen[d] {
			continue
		}
		seen[d] = true
		if st := p.ca[d]; st != nil && (st.known && now.Before(st.expires) || st.inflight != nil) {
			continue
		}
		if !p.blocked.match(d) {
			domains = append(domains, d)
		}
	}
	p.caMu.Unlock()
	if len(domains) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sharedWait)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, d := range domains {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			b, ok := shared.Get(ctx, d)
			if !ok {
				return
			}
			var e catchAllEntry
			if json.Unmarshal(b, &e) != nil {
				return
			}
			exp := time.UnixMilli(e.Expires)
			if !time.Now().Before(exp) {
				return
			}
			p.caMu.Lock()
			defer p.caMu.Unlock()
			st := p.caStateLocked(d)
			if !st.known || st.expires.Before(exp) {
				st.known, st.catchAll, st.expires = true, e.CatchAll, exp
			}
		}()
	}
	wg.Wait()
}

// shareCatchAll hands a conclusive catch-all answer to the fleet.
func (p *Prober) shareCatchAll(domain string, catchAll bool, expires time.Time) {
	if p.cfg.CatchAll == nil {
		return
	}
	b, _ := json.Marshal(catchAllEntry{CatchAll: catchAll, Expires: expires.UnixMilli()})
	p.cfg.CatchAll.Put(domain, b)
}

// Share makes the prober one of a fleet: MaxPerHost then bounds the sessions of every prober
// sharing slots, and catch-all answers are shared through catchAll. Either may be nil. It must be
// called before the first probe.
func (p *Prober) Share(slots Slots, catchAll Shared) {
	p.cfg.Slots, p.cfg.CatchAll = slots, catchAll
}
