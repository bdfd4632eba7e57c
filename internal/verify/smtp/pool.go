package smtp

import (
	"net/netip"
	"sync"
	"time"
)

// The circuit breaker of an MX address. One failed connection (refused, silent, closed before
// the banner) is often transient: the address is skipped for retryAfter only, then half-open —
// one session may try it while the addresses waiting for it queue behind that session. Every
// further failure in a row doubles the pause, up to downFor, so that a server that keeps refusing
// is skipped without a dial per address. A refusing 5xx banner is persistent at once.
const (
	retryAfter = 250 * time.Millisecond
	downFor    = 30 * time.Second
)

// limitFor is how long a pool keeps to the number of sessions that worked when the server
// refused one more (a per-client connection limit).
const limitFor = 30 * time.Second

// maxPipeline bounds the RCPTs of one write, well inside any server's input buffer.
const maxPipeline = 50

// pool holds the sessions to one MX address. Politeness limits are per address because many
// domains share one mail server.
type pool struct {
	p    *Prober
	ip   netip.Addr
	addr string

	mu        sync.Mutex
	queue     []*job
	sessions  int // open or opening
	opening   int
	idle      []*session
	returning int // sessions that have their replies and are on their way back to take
	downUntil time.Time
	downErr   error
	failures  int       // failed connections in a row while no session was open (circuit breaker)
	limit     int       // sessions the server tolerates, learnt from a refused extra one; 0 means MaxPerHost
	limitTill time.Time // until when limit holds
	txnMax    int       // recipients per transaction the server takes, learnt from 452 4.5.3; 0 means unknown
	proven    bool      // a session has been opened here: until then one is tried at a time
	plainOK   bool      // a MAIL FROM has been accepted here without TLS
	needTLS   bool      // MAIL FROM was answered 530: start TLS before it
}

func (pl *pool) enqueue(js ...*job) {
	pl.mu.Lock()
	var moved []*job
	if time.Now().Before(pl.downUntil) {
		// The breaker is open: addresses with another MX go there; the others wait for the
		// half-open trial when the failure may be transient, and are answered now when not.
		for _, j := range js {
			if pl.failures == 1 && j.next < len(j.targets)-1 || pl.failures > 1 {
				moved = append(moved, j)
			} else {
				pl.queue = append(pl.queue, j)
			}
		}
	} else {
		pl.queue = append(pl.queue, js...)
	}
	pl.dispatchLocked()
	err := pl.downErr
	pl.mu.Unlock()
	for _, j := range moved {
		pl.p.failover(j, err)
	}
}

// maxSessionsLocked is the number of sessions the pool may have: none while the breaker is
// open, one while it is half-open or the address has never been reached, the learnt per-client limit, else MaxPerHost.
func (pl *pool) maxSessionsLocked() int {
	now := time.Now()
	switch {
	case now.Before(pl.downUntil):
		return 0
	case pl.failures > 0 || !pl.proven:
		// Half-open, or never reached: one session finds out before others knock.
		return 1
	case pl.limit > 0 && now.Before(pl.limitTill):
		return pl.limit
	}
	return pl.p.cfg.MaxPerHost
}

// requeue hands unanswered jobs back, ahead of the others, for another session.
func (pl *pool) requeue(js []*job) { pl.requeueJobs(js, true) }

// requeueJobs is requeue; a job sent back without penalty (the server's recipient limit, not a
// failure) does not use up one of its attempts.
func (pl *pool) requeueJobs(js []*job, penalty bool) {
	var back []*job
	for _, j := range js {
		if penalty {
			j.attempts++
		}
		switch {
		case j.expired(time.Now()):
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: ErrTimeout})
		case j.attempts > 3:
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: ErrNoHost})
		default:
			back = append(back, j)
		}
	}
	pl.mu.Lock()
	pl.queue = append(back, pl.queue...)
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// dispatchLocked wakes idle sessions and opens new ones, up to MaxPerHost, when the queue holds
// more than the sessions being opened will take.
func (pl *pool) dispatchLocked() {
	pending := 0
	for _, j := range pl.queue {
		if !j.finished.Load() {
			pending++
		}
	}
	// A session that has just read its replies finishes its callers' jobs before it reaches
	// take; work that arrives in that moment is its to serve, not a reason for a new session.
	pending -= pl.returning * maxErrors
	for len(pl.idle) > 0 && pending > 0 {
		s := pl.idle[len(pl.idle)-1]
		pl.idle = pl.idle[:len(pl.idle)-1]
		select {
		case s.wake <- struct{}{}:
		default:
		}
		pending -= maxErrors
	}
	for pl.sessions < pl.maxSessionsLocked() && pending > pl.opening*maxErrors {
		pl.sessions++
		pl.opening++
		go pl.run()
	}
}

// run opens one session and serves the queue with it until it is spent, broken or idle.
func (pl *pool) run() {
	s, err := pl.open()
	pl.mu.Lock()
	pl.opening--
	if err != nil {
		pl.sessions--
		if pl.sessions > 0 && pl.failures == 0 {
			// Other sessions work: the server takes no more from us (a per-client connection
			// limit, 421 at the banner). Keep to those; the queue is theirs to serve.
			pl.limit, pl.limitTill = max(pl.sessions, 1), time.Now().Add(limitFor)
			pl.dispatchLocked() // wake idle sessions for the work this one was opened for
			pl.mu.Unlock()
			return
		}
		var moved []*job
		if pl.sessions == 0 {
			// Nobody can reach this address: the breaker opens. The waiting addresses go to
			// their next MX; those without one wait for the half-open trial after a first
			// failure, which may be transient.
			pl.failures++
			pause := min(retryAfter<<min(pl.failures-1, 10), downFor)
			if persistent(err) {
				pl.failures, pause = max(pl.failures, 8), downFor
			}
			pl.downUntil, pl.downErr = time.Now().Add(pause), err
			keep := pl.queue[:0:0]
			for _, j := range pl.queue {
				if pl.failures == 1 && j.next == len(j.targets)-1 && !j.finished.Load() {
					keep = append(keep, j)
				} else {
					moved = append(moved, j)
				}
			}
			pl.queue = keep
			time.AfterFunc(pause, pl.halfOpen)
		}
		pl.mu.Unlock()
		for _, j := range moved {
			pl.p.failover(j, err)
		}
		return
	}
	pl.failures, pl.downUntil, pl.proven = 0, time.Time{}, true
	// Now that the address answers, open the sessions the queue needs besides this one, which
	// is on its way to take.
	s.returning = true
	pl.returning++
	pl.dispatchLocked()
	pl.mu.Unlock()
	for s.usable() {
		batch := pl.take(s)
		if batch == nil {
			break
		}
		s.exchange(batch)
	}
	s.quit()
	pl.mu.Lock()
	pl.arrivedLocked(s)
	pl.sessions--
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// halfOpen lets one session try the address again for the addresses waiting on it.
func (pl *pool) halfOpen() {
	pl.mu.Lock()
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// take returns the next RCPTs for s, waiting while the pool is idle; nil means "close s".
func (pl *pool) take(s *session) []rcpt {
	for {
		pl.mu.Lock()
		pl.arrivedLocked(s)
		select {
		case <-pl.p.closing:
			pl.mu.Unlock()
			return nil
		default:
		}
		for len(pl.queue) > 0 && pl.queue[0].finished.Load() {
			pl.queue = pl.queue[1:]
		}
		if len(pl.queue) > 0 {
			batch := pl.fillLocked(s)
			pl.mu.Unlock()
			return batch
		}
		pl.idle = append(pl.idle, s)
		pl.mu.Unlock()

		t := time.NewTimer(pl.p.cfg.IdleTimeout)
		select {
		case <-s.wake:
			t.Stop()
			continue
		case <-t.C:
		case <-pl.p.closing:
			t.Stop()
		}
		pl.mu.Lock()
		removed := false
		for i, x := range pl.idle {
			if x == s {
				pl.idle = append(pl.idle[:i], pl.idle[i+1:]...)
				removed = true
				break
			}
		}
		pl.mu.Unlock()
		if removed {
			return nil
		}
		<-s.wake // woken as the timer fired: serve the work it was woken for
	}
}

// replied marks s as on its way back to take: it has read the replies of its exchange and is
// about to settle them, which wakes the callers whose next address it should serve.
func (pl *pool) replied(s *session) {
	pl.mu.Lock()
	if !s.returning {
		s.returning = true
		pl.returning++
	}
	pl.mu.Unlock()
}

// arrivedLocked ends what replied began, in take or when s closes.
func (pl *pool) arrivedLocked(s *session) {
	if s.returning {
		s.returning = false
		pl.returning--
	}
}

// fillLocked picks jobs for one exchange of s: as many as its error budget allows if every one
// were rejected, plus a random-local-part RCPT for each domain whose catch-all answer is
// neither known nor already being asked.
func (pl *pool) fillLocked(s *session) []rcpt {
	if pl.txnMax > 0 {
		s.rcptMax = min(s.rcptMax, pl.txnMax)
	}
	window := min(maxErrors-s.errors, maxPipeline, s.rcptMax)
	if !s.pipelining {
		window = min(window, 2)
	}
	now := time.Now()
	var batch []rcpt
	keep := pl.queue[:0:0]
	for i, j := range pl.queue {
		if j.finished.Load() {
			continue
		}
		if j.expired(now) {
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: ErrTimeout})
			continue
		}
		if len(batch) >= window {
			keep = append(keep, pl.queue[i:]...)
			break
		}
		known, catchAll, claim, wait, ok := pl.p.catchAllFor(j.domain, window-len(batch))
		if !ok {
			keep = append(keep, pl.queue[i:]...)
			break
		}
		if j.deadline.IsZero() {
			j.deadline = now.Add(pl.p.cfg.Timeout)
		}
		if claim != nil {
			batch = append(batch, rcpt{probe: claim, deadline: j.deadline})
		}
		batch = append(batch, rcpt{j: j, known: known, catchAll: catchAll, wait: wait, deadline: j.deadline})
		if claim != nil {
			batch[len(batch)-1].wait = claim
		}
	}
	pl.queue = keep
	return batch
}

func (pl *pool) setPlainOK() {
	pl.mu.Lock()
	pl.plainOK = true
	pl.mu.Unlock()
}

func (pl *pool) tlsState() (plainOK, needTLS bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.plainOK, pl.needTLS
}

func (pl *pool) setNeedTLS() {
	pl.mu.Lock()
	pl.needTLS = true
	pl.mu.Unlock()
}

// learnTxnMax records the number of recipients per transaction the server takes.
func (pl *pool) learnTxnMax(n int) {
	pl.mu.Lock()
	if pl.txnMax == 0 || n < pl.txnMax {
		pl.txnMax = n
	}
	pl.mu.Unlock()
}
