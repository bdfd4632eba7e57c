package smtp

import (
	"net/netip"
	"sync"
	"time"
)

// downFor is how long an MX address that could not be reached is skipped, so that a batch does
// not wait for the same refused or silent server once per address.
const downFor = 30 * time.Second

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
	plainOK   bool // a MAIL FROM has been accepted here without TLS
	needTLS   bool // MAIL FROM was answered 530: start TLS before it
}

func (pl *pool) enqueue(js ...*job) {
	pl.mu.Lock()
	if time.Now().Before(pl.downUntil) {
		err := pl.downErr
		pl.mu.Unlock()
		for _, j := range js {
			pl.p.failover(j, err)
		}
		return
	}
	pl.queue = append(pl.queue, js...)
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// requeue hands unanswered jobs back, ahead of the others, for another session.
func (pl *pool) requeue(js []*job) {
	var back []*job
	for _, j := range js {
		j.attempts++
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
	for pl.sessions < pl.p.cfg.MaxPerHost && pending > pl.opening*maxErrors {
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
		var moved []*job
		if pl.sessions == 0 {
			// Nobody can reach this address: send the waiting addresses to their next MX.
			pl.downUntil, pl.downErr = time.Now().Add(downFor), err
			moved, pl.queue = pl.queue, nil
		}
		pl.mu.Unlock()
		for _, j := range moved {
			pl.p.failover(j, err)
		}
		return
	}
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
