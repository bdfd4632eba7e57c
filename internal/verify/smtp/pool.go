package smtp

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
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
	probes    []rcpt // catch-all probes to ask again after a recipient limit (reask), ahead of the queue
	sessions  int    // open or opening
	opening   int
	idle      []*session
	returning int                   // sessions that have their replies and are on their way back to take
	breaker                         // failed connections to this address (breaker.go)
	limit     int                   // sessions the server tolerates, learnt from a refused extra one; 0 means MaxPerHost
	limitTill time.Time             // until when limit holds
	txnMax    int                   // recipients per transaction the server takes, learnt from 452 4.5.3; 0 means unknown
	proven    bool                  // a server has greeted us here: until then one session is tried at a time
	live      map[*session]struct{} // open sessions, busy or idle (not those being opened)
	openedAt  time.Time             // when the last session opened here: the queue has waited at a working host since
	rcpts     int                   // RCPT replies read here, for the rejection rate
	rejected  int                   // of which failed (4xx, 5xx)
	plainOK   bool                  // a MAIL FROM has been accepted here without TLS
	tlsMailOK bool                  // a MAIL FROM has been accepted here over TLS
	needTLS   bool                  // MAIL FROM was answered 530: start TLS before it
	slotUntil time.Time             // no new session before this: the fleet had no slot free (fleet.go)
	slotRetry time.Duration         // the pause after the last failed Acquire; 0 after a success
	draining  int                   // stalled sessions waiting for the server to finish (session.drain)
	used      time.Time             // when addresses last came here (enqueue)
	retired   bool                  // forgotten by the prober (forget.go): takes no more addresses
}

// enqueue queues js here, and reports false, taking nothing, once the pool is retired.
func (pl *pool) enqueue(js ...*job) bool {
	pl.mu.Lock()
	if pl.retired {
		pl.mu.Unlock()
		return false
	}
	pl.used = time.Now()
	moved := pl.admitLocked(js)
	if pl.draining > 0 {
		pl.startBudgetsLocked(pl.queue)
	}
	if len(pl.live) > 0 {
		// A host that works: the stretch on unreachable ones ends here.
		now := time.Now()
		for _, j := range js {
			j.reachedHost(now)
		}
	} else {
		pl.watchLocked(js)
	}
	pl.dispatchLocked()
	err := pl.downErr
	pl.mu.Unlock()
	for _, j := range moved {
		pl.p.failover(j, err)
	}
	return true
}

// maxSessionsLocked is the number of sessions the pool may have: none while the breaker is
// open, one while it is half-open or the address has never been reached, the learnt per-client limit, else MaxPerHost.
// While the fleet has just had no slot free for this address, it keeps to the sessions it has.
func (pl *pool) maxSessionsLocked() int {
	now := time.Now()
	n := pl.p.cfg.MaxPerHost
	switch {
	case pl.openAt(now):
		return 0
	case pl.failures > 0 || !pl.proven:
		// Half-open, or never reached: one session finds out before others knock.
		n = 1
	case pl.limit > 0 && now.Before(pl.limitTill):
		n = pl.limit
	}
	if now.Before(pl.slotUntil) {
		n = min(n, pl.sessions)
	}
	return n
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
		case j.attempts > 3 && j.lastReply.Code != 0:
			// Sessions were had, and each ended with a 421: a busy server, not a refused one.
			j.finish(Result{Verdict: Unknown, Host: j.host(), Reply: j.lastReply})
		case j.attempts > 3 && j.lastErr != nil:
			// Sessions were had and each failed: why the last one did (a server breaking the
			// protocol, say) is the answer's reason, not a refused connection.
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: fmt.Errorf("%w: %w", ErrNoHost, j.lastErr)})
		case j.attempts > 3:
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: ErrNoHost})
		default:
			back = append(back, j)
		}
	}
	pl.mu.Lock()
	pl.queue = append(back, pl.queue...)
	pl.watchLocked(back)
	pl.dispatchLocked()
	pl.mu.Unlock()
}

// watchLocked arms expireQueued for the earliest end of js's budgets — the deadline of those a
// session took, the time on unreachable hosts of those spending it — so that an address waiting
// here for the half-open try, or for a dial that hangs, is answered when its budget ends rather
// than when the dial gives up. expireQueued does nothing while a session is open here.
func (pl *pool) watchLocked(js []*job) {
	var expiry time.Time
	for _, j := range js {
		end := j.deadline
		if !j.unreachedSince.IsZero() {
			if u := j.unreachableEnd(pl.p.cfg.Timeout); end.IsZero() || u.Before(end) {
				end = u
			}
		}
		if !end.IsZero() && (expiry.IsZero() || end.Before(expiry)) {
			expiry = end
		}
	}
	if !expiry.IsZero() {
		time.AfterFunc(time.Until(expiry), pl.expireQueued)
	}
}

// startBudgetsLocked starts the budgets of the jobs of js whose budget has not started, and arms
// the expiry of them all: an expiry that came while another session was open here did nothing,
// and a stalled session takes no more work. Waiting for a session of a host that works is not
// counted against a budget (docs/architecture.md); waiting while one of the host's sessions is
// stalled is, so that a host slower than the budget answers its addresses timeout within it
// instead of holding them for its drains.
func (pl *pool) startBudgetsLocked(js []*job) {
	deadline := time.Now().Add(pl.p.cfg.Timeout)
	var started []*job
	for _, j := range js {
		if j.deadline.IsZero() && !j.finished.Load() {
			j.deadline = deadline
			started = append(started, j)
		}
	}
	pl.watchLocked(js)      // the earliest end, perhaps past
	pl.watchLocked(started) // the budgets started now
}

// dispatchLocked wakes idle sessions for the work in the queue, and opens new ones, up to
// MaxPerHost, only for the work that the sessions already open (or being opened) are not
// expected to absorb. Every session costs the server a connection and us a connect and an EHLO,
// and a session retired with error budget left wasted part of it; so the pool counts what each
// open session can still take at the rejection rate seen at this address (expectedRcpts) rather
// than assuming that every open session is spent by its current exchange.
func (pl *pool) dispatchLocked() {
	select {
	case <-pl.p.closing:
		// The prober is closed: no session is opened any more, and what waits is answered.
		for _, j := range pl.queue {
			j.finish(Result{Verdict: Unknown, Host: j.host(), Err: ErrClosed})
		}
		pl.queue = nil
		pl.dropProbesLocked()
		return
	default:
	}
	pending := pl.pendingLocked()
	// Idle sessions are paid for: wake as many as the queue has work for now. A session that has
	// just read its replies finishes its callers' jobs before it reaches take; work that arrives
	// in that moment is its to serve, not a reason to wake another.
	wake := pending - pl.returning*maxErrors
	for len(pl.idle) > 0 && wake > 0 {
		s := pl.idle[len(pl.idle)-1]
		pl.idle = pl.idle[:len(pl.idle)-1]
		select {
		case s.wake <- struct{}{}:
		default:
		}
		wake -= max(s.left, 1)
	}
	short := pl.shortfallLocked(pending, nil)
	fresh := expectedRcpts(maxErrors, pl.rejectRateLocked())
	for pl.sessions < pl.maxSessionsLocked() && short > 0 {
		pl.sessions++
		pl.opening++
		short -= fresh
		pl.p.running.Add(1)
		go pl.run()
	}
}

// shortfallLocked is the number of the pending RCPTs that the open sessions other than except,
// and those being opened, are not expected to take within the horizon. A session whose QUIT
// travels with its exchange under way (last) takes nothing more itself, but its slot goes to a
// fresh session as soon as it closes: it is counted as that fresh session, so that the sessions
// deciding after it (lastLocked) retire only for work its replacement will not take either.
func (pl *pool) shortfallLocked(pending int, except *session) float64 {
	rho := pl.rejectRateLocked()
	fresh := expectedRcpts(maxErrors, rho)
	short := float64(pending) - float64(pl.opening)*fresh
	for s := range pl.live {
		switch {
		case s == except:
		case s.last:
			short -= fresh
		default:
			short -= expectedRcpts(float64(s.left)-float64(s.inflight)*rho, rho)
		}
	}
	return short
}

// retireBudget is the error budget at or below which a session may retire early (lastLocked).
// Its windows are that small from then on, and a session that spends the budget to the end
// takes one more round trip per RCPT or two; retiring wastes half the budget at a rejection rate
// of one half. On BenchmarkOracle's world (internal/verify; BENCHMARKS.md, "Engine vs an oracle
// client") 3 has the first wave of sessions retire after three writes, the last of them at most
// 3 RCPTs with QUIT: 63 sessions as with 2, the warm run 6 % faster and the cold one within 2 %;
// 4 was faster still but opened 65, over the 64.
const retireBudget = 3

// lastLocked reports whether s, with at most retireBudget errors left, should send its next
// window (its whole budget) together with QUIT and make room for a fresh session: when every
// session the server tolerates is open and the queue holds a fresh session's worth of work that
// the others, and the fresh sessions that will replace those already retiring, will not take. A
// session with one or two errors left sends one or two RCPTs per round trip, a fresh one (after
// its connect and EHLO) up to maxErrors; retiring wastes at most that budget less its rejected
// RCPTs, and QUIT in the same write frees the connection slot one round trip sooner than QUIT
// after the replies. Sessions that do not retire spend their budget to the end meanwhile,
// beside the fresh ones, so that only the slots that will host a second session wait for it.
func (pl *pool) lastLocked(s *session, budget int) bool {
	if budget > retireBudget || !s.pipelining || pl.sessions < pl.maxSessionsLocked() {
		return false
	}
	return pl.shortfallLocked(pl.pendingLocked(), s) >= expectedRcpts(maxErrors, pl.rejectRateLocked())
}

// pendingLocked is the number of RCPTs waiting for a session: unfinished jobs and probes to ask
// again.
func (pl *pool) pendingLocked() int {
	pending := 0
	for _, it := range pl.probes {
		if !it.probe.resolved() {
			pending++
		}
	}
	for _, j := range pl.queue {
		if !j.finished.Load() {
			pending++
		}
	}
	return pending
}

// maxReasks bounds how often one catch-all probe is asked again after a recipient limit.
const maxReasks = 3

// reask hands a catch-all probe that met the server's recipient limit back, to go ahead of the
// queue in the next exchange (fillLocked). Its accepted addresses wait for its answer
// (Prober.accepted) within their own deadlines; past its deadline, or asked too often, it is
// inconclusive.
func (pl *pool) reask(it rcpt) {
	pl.mu.Lock()
	it.probe.reasks++
	if it.probe.reasks > maxReasks || !time.Now().Before(it.deadline) {
		pl.mu.Unlock()
		pl.p.resolveCatchAll(it.probe, caInconclusive)
		return
	}
	pl.probes = append(pl.probes, it)
	pl.dispatchLocked()
	pl.mu.Unlock()
	// Addresses of the domain in other pools wait for this probe too: should no session here
	// take it in time (the fleet has no slot free, say), it ends at its deadline all the same.
	time.AfterFunc(time.Until(it.deadline), func() { pl.p.resolveCatchAll(it.probe, caInconclusive) })
}

// dropProbesLocked ends the probes waiting to be asked again: nobody can reach this address.
func (pl *pool) dropProbesLocked() {
	for _, it := range pl.probes {
		pl.p.resolveCatchAll(it.probe, caInconclusive)
	}
	pl.probes = nil
}

// horizon is the number of further exchanges over which an open session is counted on to take
// work (expectedRcpts): the longer, the fewer sessions a batch opens and the longer its tail,
// when the last sessions spend their budget a few RCPTs at a time. On BenchmarkOracle's world
// (internal/verify; BENCHMARKS.md, "Engine vs an oracle client") 2 opened 67 sessions, 3 opened
// 63 and was the fastest of the three within the 64, 4 opened 62 and was 10 % slower.
const horizon = 3

// rejectPrior is the weight, in RCPT replies, of the pessimistic prior "every RCPT is rejected"
// in the rejection rate: until an address has answered a few RCPTs, each session is counted on
// for its error budget only, as if every RCPT failed.
const rejectPrior = 4

// rateMemory bounds the RCPT replies the rejection rate is computed from: past it, the counts
// are halved, so that older replies weigh less.
const rateMemory = 2000

// rejectRateLocked is the share of RCPTs that failed at this address, with the prior above. It
// only decides how many sessions are opened (dispatchLocked); no window ever relies on it, so a
// wrong estimate costs time or a few sessions, never a throttled reply.
func (pl *pool) rejectRateLocked() float64 {
	return min(max(float64(pl.rejected+rejectPrior)/float64(pl.rcpts+rejectPrior), 0.02), 1)
}

// expectedRcpts is the number of RCPTs a session with budget errors left can expect to send over
// the next horizon exchanges when a share rho of RCPTs fail: each exchange sends as many RCPTs as
// the budget left (fillLocked), and a share rho of them use it up, so the windows shrink by the
// factor 1−rho: budget × (1 − (1−rho)^horizon) / rho. With rho = 1 that is the budget itself.
func expectedRcpts(budget, rho float64) float64 {
	if budget <= 0 {
		return 0
	}
	if rho >= 1 {
		return budget
	}
	keep := 1.0
	for range horizon {
		keep *= 1 - rho
	}
	return budget * (1 - keep) / rho
}

// run opens one session and serves the queue with it until it is spent, broken or idle. With a
// fleet-wide limit, the session first takes a slot of the address, and gives it back once its
// connection is closed.
func (pl *pool) run() {
	defer pl.p.running.Add(-1)
	lease, ok := pl.lease()
	if !ok {
		return
	}
	select {
	case <-pl.p.closing:
		// Closed while the slot was being taken: no session is opened any more.
		release(lease)
		pl.mu.Lock()
		pl.opening--
		pl.sessions--
		pl.dispatchLocked() // answers what waits (ErrClosed)
		pl.mu.Unlock()
		return
	default:
	}
	dialed := time.Now()
	s, err := pl.open()
	if err != nil {
		release(lease)
	} else {
		s.lease = lease
	}
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
			moved = pl.tripLocked(err, dialed)
		}
		pl.mu.Unlock()
		for _, j := range moved {
			pl.p.failover(j, err)
		}
		return
	}
	pl.breaker.reset()
	pl.proven = true
	// The address answers: the addresses waiting here wait for a working host now, which is not
	// counted against them (unreachable) until a dial here fails again.
	now := time.Now()
	pl.openedAt = now
	for _, j := range pl.queue {
		j.reachedHost(now)
	}
	if pl.live == nil {
		pl.live = map[*session]struct{}{}
	}
	pl.live[s] = struct{}{}
	s.left = maxErrors - s.errors
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
	if s.stalled {
		// The server is still at work on this connection: it keeps its place among the sessions
		// until the server is done, but takes no more work, and what waits here meanwhile waits
		// on its budget (startBudgetsLocked), since the server is not answering within budgets.
		pl.mu.Lock()
		pl.arrivedLocked(s)
		delete(pl.live, s)
		pl.draining++
		pl.startBudgetsLocked(pl.queue)
		pl.mu.Unlock()
		s.drain()
	}
	s.quit()
	release(s.lease)
	pl.mu.Lock()
	pl.arrivedLocked(s)
	delete(pl.live, s)
	if s.stalled {
		pl.draining--
	}
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
		pl.probes = slices.DeleteFunc(pl.probes, func(it rcpt) bool { return it.probe.resolved() })
		if s.lease != nil && pl.sessions > 1 && s.lease.Wanted(pl.sessions) {
			// Another worker of the fleet waits for a slot of this address: this session gives
			// its slot up between exchanges, and the pool holds its new sessions back for a
			// moment so that the waiter, not this pool, takes the slot (fleet.go).
			pl.slotUntil = time.Now().Add(slotYield)
			time.AfterFunc(slotYield, pl.halfOpen)
			pl.mu.Unlock()
			return nil
		}
		if len(pl.queue) > 0 || len(pl.probes) > 0 {
			batch := pl.fillLocked(s)
			pl.mu.Unlock()
			return batch
		}
		pl.idle = append(pl.idle, s)
		pl.mu.Unlock()

		// An idle session whose slot another worker waits for closes at once rather than at
		// the idle timeout.
		var wants <-chan struct{}
		if s.lease != nil {
			wants = s.lease.Wants()
		}
		t := time.NewTimer(pl.p.cfg.IdleTimeout)
		select {
		case <-wants:
			t.Stop()
		case <-s.wake:
			t.Stop()
			if !s.usable() {
				// The lease lapsed while the session was idle: it closes, and the pool opens
				// another for the work it was woken for once it has.
				return nil
			}
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

// arrivedLocked ends what replied began, in take or when s closes: s has settled its exchange,
// so its budget and the replies it read are brought into the pool's accounts.
func (pl *pool) arrivedLocked(s *session) {
	if s.returning {
		s.returning = false
		pl.returning--
	}
	s.left, s.inflight = maxErrors-s.errors, 0
	pl.rcpts += s.rcpts
	pl.rejected += s.rejected
	s.rcpts, s.rejected = 0, 0
	if pl.rcpts > rateMemory {
		// The rate follows the lists being verified now, not the address's whole history.
		pl.rcpts, pl.rejected = pl.rcpts/2, pl.rejected/2
	}
}

// greeted lets the other sessions the queue needs dial as soon as the first session to a
// never-reached address has had its 220 banner, rather than after its EHLO too: the server is
// there and takes connections.
func (pl *pool) greeted() {
	pl.mu.Lock()
	if !pl.proven && pl.failures == 0 {
		pl.proven = true
		pl.dispatchLocked()
	}
	pl.mu.Unlock()
}

// fillLocked picks jobs for one exchange of s: as many as its error budget allows if every one
// were rejected, plus a catch-all probe RCPT (probeLocal) for each domain whose catch-all answer is
// neither known nor already being asked.
func (pl *pool) fillLocked(s *session) []rcpt {
	if pl.txnMax > 0 {
		s.rcptMax = min(s.rcptMax, pl.txnMax)
	}
	budget := maxErrors - s.errors
	window := min(budget, maxPipeline, s.rcptMax)
	if !s.pipelining {
		window = min(window, 2)
	}
	if unproven := s.tls && !pl.tlsMailOK || !s.tls && !pl.plainOK; s.pipelining && !s.inTxn && unproven && budget >= 2 {
		// No MAIL FROM has been accepted here yet (in plain text, or over TLS for a TLS
		// session), so the budget keeps one error for it. Where the MAIL travels with the RCPTs
		// (exchange), a refused one fails every RCPT behind it too. Where it goes alone first
		// (a plain session to a server that offers STARTTLS), a 530 "start TLS first" is an
		// error of its own before the RCPTs follow over TLS.
		window = min(window, budget-1)
	}
	now := time.Now()
	var batch []rcpt
	for len(pl.probes) > 0 && len(batch) < window {
		it := pl.probes[0]
		pl.probes = pl.probes[1:]
		if !now.Before(it.deadline) || it.probe.resolved() {
			pl.p.resolveCatchAll(it.probe, caInconclusive) // does nothing to one resolved
			continue
		}
		batch = append(batch, it)
	}
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
		if j.deadline.IsZero() {
			j.deadline = now.Add(pl.p.cfg.Timeout)
		}
		j.asked.Store(true)
		// A window of one (a server that takes one recipient per transaction, or one error of
		// budget left) never fits a catch-all probe beside its address: the probe goes alone, and
		// the address follows in the next exchange, waiting for the probe's answer. An empty
		// batch here would close the session and have the pool open another for the same work,
		// without end.
		alone := len(batch) == 0 && window == 1
		known, catchAll, claim, wait, ok := pl.p.catchAllFor(j.domain, window-len(batch), alone)
		if !ok {
			if claim != nil {
				batch = append(batch, rcpt{probe: claim, deadline: j.deadline})
			}
			keep = append(keep, pl.queue[i:]...)
			break
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
	s.inflight = len(batch)
	s.last = pl.lastLocked(s, budget)
	return batch
}

func (pl *pool) setPlainOK() {
	pl.mu.Lock()
	pl.plainOK = true
	pl.mu.Unlock()
}

func (pl *pool) setTLSMailOK() {
	pl.mu.Lock()
	pl.tlsMailOK = true
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
