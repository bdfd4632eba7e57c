package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// Slots is the fleet-wide session cap (smtp.Slots): slot n of MX address a is the key "a.n" of
// the SMTP_SLOTS bucket, and a session holds it from before it dials until its connection is
// closed. Taking a slot is an atomic create of its key, so two workers never hold one slot; the
// bucket's MaxAge is the lease's TTL, so a slot whose holder died (kill -9, a lost host) comes
// back by itself TTL after the holder's last renewal. See docs/fleet.md.
//
// When the bucket cannot be reached, a worker opens sessions without leases, up to a local
// fallback share of the cap (see fallback), so that answers stay right while NATS recovers.
type Slots struct {
	b   *bucket
	ttl time.Duration
	id  []byte // this worker's name in the keys it holds, for whoever inspects the bucket

	// ctx ends at close: it bounds the watch and the renewals, so that closing never waits for
	// NATS.
	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
	// unsure counts the look-ups for keys that a create whose answer was lost may have stored
	// (giveBackUnsure); close waits for them.
	unsure sync.WaitGroup
	// givenBack counts the keys giveBackUnsure found and deleted, unleasedOpened the sessions
	// fallback opened (docs/operations.md, "Health, readiness and metrics").
	givenBack, unleasedOpened prometheus.Counter

	mu       sync.Mutex
	held     map[string]*lease
	freed    map[string]*freed    // address key ⇒ closed at the next release of one of its slots
	wants    map[string]*want     // address key ⇒ other workers waiting for one of its slots
	workers  map[string]time.Time // the other workers seen writing to the bucket, by id, and when
	unleased map[string]int       // address key ⇒ sessions open without a lease (fallback)
	failedAt time.Time            // the last time the bucket could not be asked
	okAt     time.Time            // the last time it answered (a write of this worker or a watched one)
	closed   bool
}

// freed is the channel a pool waiting for a slot of one address waits on.
type freed struct {
	ch   chan struct{}
	used time.Time // when a pool last took it
}

// want is what this worker knows of the other workers waiting for slots of one address.
type want struct {
	ch      chan struct{}        // closed at a wait, replaced once the wait is older than wantFor
	at      time.Time            // the last wait
	used    time.Time            // when an idle session last took ch
	tokens  int                  // a slot to give up: one per wait, until wantFor after it
	waiters map[string]time.Time // the workers that waited, by id, and when they last did
}

// forgetAfter is how long an address's channels and waits are kept once nobody uses them: far
// longer than any pool waits for a slot (slotRetryMax) or a session idles, so that nobody still
// waits on a channel that is forgotten.
const forgetAfter = time.Minute

// wantFor is how long a wait asks the holders for a slot; waiterMemory is how long a worker that
// waited counts as one of those sharing the address (longer than the longest retry pause, so
// that a worker waiting steadily is always counted).
const (
	wantFor      = time.Second
	waiterMemory = 3 * time.Second
)

// wantSuffix names the key a worker writes when it found every slot of an address taken:
// "<address>.want". It is never a slot number.
const wantSuffix = "want"

// workerMemory is how long a worker seen writing to the bucket counts towards the fallback share,
// in lease TTLs (a minute): a worker with a session open renews its lease every third of the TTL
// (5 s), so one that is working is always counted.
const workerMemory = 4

// askAgainAfter is how long, after the bucket could not be asked, new sessions take the fallback
// without asking it again, unless it is seen answering meanwhile: during an outage each new
// session would otherwise wait for a create to fail (up to smtp's 500 ms budget) first.
const askAgainAfter = time.Second

// releaseWait bounds the deletes of the leases still held when the worker closes.
const releaseWait = 500 * time.Millisecond

func newSlots(b *bucket, ttl time.Duration, reg prometheus.Registerer) *Slots {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Slots{b: b, ttl: ttl, id: []byte(nuid.Next()), ctx: ctx, cancel: cancel, held: map[string]*lease{},
		freed: map[string]*freed{}, wants: map[string]*want{}, workers: map[string]time.Time{}, unleased: map[string]int{}}
	s.register(reg)
	s.done.Add(2)
	go s.renew()
	go s.watch()
	return s
}

// register makes the slots' counters, registered with reg (may be nil); workers in one process
// share them.
func (s *Slots) register(reg prometheus.Registerer) {
	s.givenBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mailvet_smtp_slots_given_back_total",
		Help: "Session slot keys stored by a create whose answer was lost, found and deleted by the worker that stored them.",
	})
	s.unleasedOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mailvet_smtp_sessions_unleased_total",
		Help: "SMTP sessions opened without a fleet slot lease because the slots bucket could not be reached (within the local fallback share).",
	})
	if reg != nil {
		s.givenBack = health.Register(reg, s.givenBack)
		s.unleasedOpened = health.Register(reg, s.unleasedOpened)
	}
}

// Freed returns a channel closed at the next release of a slot of ip by any worker of the fleet.
func (s *Slots) Freed(ip netip.Addr) <-chan struct{} {
	key := addrKey(ip)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.freed[key]
	if f == nil {
		f = &freed{ch: make(chan struct{})}
		s.freed[key] = f
	}
	f.used = time.Now()
	return f.ch
}

// released closes the Freed channel of the address whose slot key was deleted.
func (s *Slots) released(key string) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freeLocked(key[:i])
}

// freeLocked closes the Freed channel of the address addr.
func (s *Slots) freeLocked(addr string) {
	if f := s.freed[addr]; f != nil {
		close(f.ch)
		delete(s.freed, addr)
	}
}

// forget drops what this worker keeps about addresses nobody has used for forgetAfter, so that
// the maps follow the addresses in use rather than every address ever probed.
func (s *Slots) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, f := range s.freed {
		if time.Since(f.used) > forgetAfter {
			delete(s.freed, k)
		}
	}
	for k, w := range s.wants {
		if time.Since(w.at) > forgetAfter && time.Since(w.used) > forgetAfter {
			delete(s.wants, k)
		}
	}
	from := s.workersFromLocked()
	for id, at := range s.workers {
		if at.Before(from) {
			delete(s.workers, id)
		}
	}
}

// watch follows the bucket's writes from the whole fleet: a release, so that a pool waiting for a
// slot tries again as soon as one is given back rather than polling the bucket; and a wait, so
// that this worker gives up a slot above its share and closes idle sessions (docs/fleet.md,
// "Waiting for a slot"). Every write is one message to every worker; the watch resumes by itself
// after a reconnect, and while it is down the pools fall back to their retry pauses. It also
// tells who uses the bucket (every value written is a worker's id), for the fallback share, and
// that the bucket answers again after an outage (a write went through).
func (s *Slots) watch() {
	defer s.done.Done()
	ctx := s.ctx
	for ctx.Err() == nil {
		w, err := s.b.kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			s.b.heal(err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if s.follow(ctx, w.Updates()) {
			continue // the subscription ended (the connection closed): watch again
		}
		// Closing: the client unsubscribes by itself as ctx ends, in the background, because
		// that deletes the watch's consumer, a request that may wait for NATS for seconds. Until
		// the channel is closed it may still hand over an update, which nobody must block on.
		go func() {
			for range w.Updates() {
			}
		}()
	}
}

// follow handles the watched updates until the channel closes (true) or ctx ends (false).
func (s *Slots) follow(ctx context.Context, updates <-chan jetstream.KeyValueEntry) bool {
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return false
		case e, ok = <-updates:
		}
		if !ok {
			return true
		}
		if e == nil {
			continue
		}
		key := e.Key()
		i := strings.LastIndexByte(key, '.')
		put := e.Operation() == jetstream.KeyValuePut
		s.answered(string(e.Value()), put)
		switch {
		case i < 0:
		case key[i+1:] == wantSuffix:
			if put && string(e.Value()) != string(s.id) {
				s.waited(key[:i], string(e.Value()))
			}
		case !put:
			s.released(key)
		}
	}
}

// answered records that the bucket took a write, and, for a put, that the worker whose id is its
// value uses the bucket.
func (s *Slots) answered(id string, put bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.okLocked()
	if put && id != "" && id != string(s.id) {
		s.workers[id] = s.okAt
	}
}

// okLocked records that the bucket answered; the first answer after a failure ends the fallback.
func (s *Slots) okLocked() {
	if s.failedAt.After(s.okAt) {
		s.b.log.Info("session slots bucket answers again: new SMTP sessions take leases", "bucket", s.b.kv.Bucket())
	}
	s.okAt = time.Now()
}

// failed records that the bucket could not be asked; the first failure after an answer starts
// the fallback, which is logged once.
func (s *Slots) failed(err error) {
	s.b.heal(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.failedAt.After(s.okAt) {
		s.b.log.Warn("session slots bucket unreachable: new SMTP sessions open without leases, within a local share of the cap",
			"bucket", s.b.kv.Bucket(), "workers_seen", len(s.workers)+1, "err", err)
	}
	s.failedAt = time.Now()
}

// Acquire takes a free slot among the max of ip's. It tries the slots from a random one on, so
// that workers rarely contend for the same key, and skips those this worker holds; a full address
// costs one failed create per slot, once per try (the pool waits between tries). Any error other
// than a taken key — NATS unreachable, the bucket missing — ends the try, and the session opens
// without a lease if this worker is below its fallback share of the address (see fallback).
//
// While other workers are waiting for the address, a worker that already has its share open
// (see wanted) takes no more: the slots given up for the waiters go to them, not back and forth
// between holders.
func (s *Slots) Acquire(ctx context.Context, ip netip.Addr, max, open int) (smtp.Lease, error) {
	prefix := addrKey(ip)
	if open >= s.share(prefix, max) {
		return nil, smtp.ErrNoSlot
	}
	s.mu.Lock()
	closed := s.closed
	skip := s.failedAt.After(s.okAt) && time.Since(s.failedAt) < askAgainAfter
	s.mu.Unlock()
	if closed {
		return nil, smtp.ErrNoSlot
	}
	if skip {
		return s.fallback(prefix, max, open)
	}
	start := rand.N(max)
	taken := false // the bucket has answered this try: a slot is someone else's
	for i := range max {
		key := prefix + "." + strconv.Itoa((start+i)%max)
		s.mu.Lock()
		_, mine := s.held[key]
		s.mu.Unlock()
		if mine {
			continue
		}
		sent := time.Now()
		rev, err := s.b.kv.Create(ctx, key, s.id)
		if errors.Is(err, jetstream.ErrKeyExists) {
			taken = true
			continue
		}
		if err != nil {
			s.giveBackUnsure(key) // the create may have been stored, its answer lost
		}
		if err != nil && taken {
			// A slow bucket, not an unreachable one: it has just said that slots are taken, so
			// the address may well be full and a session without a lease could put the fleet
			// over the cap. The pool waits and tries again (docs/fleet.md, "When NATS cannot be
			// reached").
			s.b.heal(err)
			return nil, smtp.ErrNoSlot
		}
		if err != nil {
			s.failed(err)
			return s.fallback(prefix, max, open)
		}
		l := &lease{s: s, key: key, addr: prefix, max: max, rev: rev, written: sent}
		s.mu.Lock()
		s.held[key] = l
		s.okLocked()
		s.mu.Unlock()
		return l, nil
	}
	// Every slot is taken: tell the holders, who give one up each between exchanges, and whose
	// idle sessions close (docs/fleet.md, "Waiting for a slot").
	if _, err := s.b.kv.Put(ctx, prefix+"."+wantSuffix, s.id); err != nil {
		s.b.heal(err)
	}
	return nil, smtp.ErrNoSlot
}

// fallback opens a session without a lease while the bucket cannot be asked, if this worker has
// fewer than its fallback share of the address's sessions open: max slots divided among the
// workers seen using the bucket in the last workerMemory TTLs, itself included. If every worker does
// the same, the fleet stays near the cap without NATS (docs/fleet.md, "When NATS cannot be
// reached"). Sessions still holding leases count towards the share.
func (s *Slots) fallback(addr string, max, open int) (smtp.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	share := s.fallbackShareLocked(max)
	if s.closed || open >= share || s.unleased[addr] >= share {
		return nil, smtp.ErrNoSlot
	}
	s.unleased[addr]++
	s.unleasedOpened.Inc()
	return &unleased{s: s, addr: addr, at: time.Now()}, nil
}

// FallbackShare is the number of sessions to one MX address with max slots that this worker
// opens while the bucket cannot be reached.
func (s *Slots) FallbackShare(max int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fallbackShareLocked(max)
}

func (s *Slots) fallbackShareLocked(slots int) int {
	n := 1 // this worker
	from := s.workersFromLocked()
	for _, at := range s.workers {
		if !at.Before(from) {
			n++
		}
	}
	return max(1, slots/n)
}

// workersFromLocked is when a worker must have been seen writing to the bucket last to count as
// one of the fleet: workerMemory TTLs ago, or, while the bucket cannot be asked, before it last
// answered. An outage hides the others' writes without stopping them, so the fleet it began with
// is the best count there is; forgetting it would leave each worker alone with the whole cap.
func (s *Slots) workersFromLocked() time.Time {
	ref := time.Now()
	if s.failedAt.After(s.okAt) {
		ref = s.okAt
	}
	return ref.Add(-workerMemory * s.ttl)
}

// Unleased is the number of sessions this worker has open without a lease, to every address.
func (s *Slots) Unleased() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int
	for _, c := range s.unleased {
		n += c
	}
	return n
}

// waited records that the worker id found every slot of the address addr taken.
func (s *Slots) waited(addr, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wantLocked(addr)
	select {
	case <-w.ch:
	default:
		close(w.ch)
	}
	now := time.Now()
	w.at, w.tokens = now, 1
	if w.waiters == nil {
		w.waiters = map[string]time.Time{}
	}
	w.waiters[id] = now
}

// wanted takes the address's request for a slot, if a recent wait left one and this worker, with
// open sessions to it, holds more than its share of the address's slots: slots divided among itself and the workers
// that have waited lately (the other holders are not known, so the share errs on the large side
// and a worker gives up too few slots rather than too many).
func (s *Slots) wanted(addr string, open, slots int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wants[addr]
	if w == nil || w.tokens == 0 || time.Since(w.at) > wantFor {
		return false
	}
	if open <= s.shareLocked(addr, slots) {
		return false
	}
	w.tokens--
	return true
}

// share is this worker's share of the address's slots: all of them while no other worker waits
// for the address, else an equal part among itself and the workers that have waited lately.
func (s *Slots) share(addr string, slots int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shareLocked(addr, slots)
}

func (s *Slots) shareLocked(addr string, slots int) int {
	w := s.wants[addr]
	if w == nil {
		return slots
	}
	for id, at := range w.waiters {
		if time.Since(at) > waiterMemory {
			delete(w.waiters, id)
		}
	}
	if len(w.waiters) == 0 {
		return slots
	}
	return max(1, slots/(len(w.waiters)+1))
}

// wantLocked is the address's wait record, made on first use. s.mu is held.
func (s *Slots) wantLocked(addr string) *want {
	w := s.wants[addr]
	if w == nil {
		w = &want{ch: make(chan struct{})}
		s.wants[addr] = w
	}
	return w
}

// wantsCh is the address's wait channel: closed while a wait is recent, open otherwise.
func (s *Slots) wantsCh(addr string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.wantLocked(addr)
	select {
	case <-w.ch:
		if time.Since(w.at) > wantFor {
			w.ch, w.tokens = make(chan struct{}), 0
		}
	default:
	}
	w.used = time.Now()
	return w.ch
}

// Held is the number of slots this worker holds.
func (s *Slots) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// unsureAfter is how long after a create's answer was lost its key is looked for: the create may
// still be on its way to the bucket when its caller gives up.
const unsureAfter = 200 * time.Millisecond

// giveBackUnsure deletes key if a create of this worker whose answer never came (its caller gave
// up, or NATS answered too late) stored it after all: the key names this worker, which holds no
// lease on it, so nobody would release it and the slot would stay taken, fleet-wide, for the
// key's whole TTL. A key this worker has meanwhile taken for a session is left alone: it is in
// held, and a later create has a later revision than the one deleted here.
func (s *Slots) giveBackUnsure(key string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.unsure.Add(1)
	s.mu.Unlock()
	kv := s.b.kv
	go func() {
		defer s.unsure.Done()
		select {
		case <-time.After(unsureAfter):
		case <-s.ctx.Done():
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e, err := kv.Get(ctx, key)
		if err != nil || string(e.Value()) != string(s.id) {
			return
		}
		s.mu.Lock()
		_, mine := s.held[key]
		s.mu.Unlock()
		if !mine && kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())) == nil {
			s.givenBack.Inc()
		}
	}()
}

// close stops the watch and the renewals, then deletes the keys of the leases still held, all at
// once and within releaseWait: a worker that stops gives its slots back at once rather than TTL
// later, and never waits for an unreachable NATS for longer than that (docs/reliability.md,
// "Shutdown"). A session still open on a released lease is no longer Valid: it retires after its
// exchange. A delete that fails leaves the key to expire within the TTL.
func (s *Slots) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	held := make([]*lease, 0, len(s.held))
	for _, l := range s.held {
		held = append(held, l)
	}
	s.mu.Unlock()
	s.cancel()
	s.done.Wait()
	s.unsure.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.release(ctx)
		}()
	}
	wg.Wait()
}

// renew rewrites, every sixth of the TTL, the keys of the leases written more than a third of the
// TTL ago, all at once: with NATS slow, one renewal's wait does not delay the others, nor close.
// Most sessions end within seconds and never need it; a long-lived one costs one write per third
// of the TTL. The same tick forgets the addresses nobody uses any more.
func (s *Slots) renew() {
	defer s.done.Done()
	t := time.NewTicker(s.ttl / 6)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var due []*lease
		for _, l := range s.held {
			if l.age() >= s.ttl/3 {
				due = append(due, l)
			}
		}
		s.mu.Unlock()
		var wg sync.WaitGroup
		for _, l := range due {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.renew()
			}()
		}
		wg.Wait()
		s.forget()
	}
}

// addrKey is ip as a key token: IPv6's colons are not allowed in keys.
func addrKey(ip netip.Addr) string {
	return strings.NewReplacer(":", "_", "%", "=").Replace(ip.Unmap().String())
}

// lease is one held slot (smtp.Lease).
type lease struct {
	s    *Slots
	key  string
	addr string // the address part of key
	max  int    // the address's slots

	mu       sync.Mutex
	rev      uint64    // the key's revision as last written by this worker
	written  time.Time // when that write was sent: the key expires TTL after it at the earliest
	lost     bool      // the key was found rewritten or gone: the slot may be someone else's
	released bool
}

func (l *lease) age() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.written)
}

// Valid reports whether the slot is certainly still this worker's for a third of the TTL more:
// NATS expires the key TTL after the last write was received, never sooner than TTL after it was
// sent, so stopping at two thirds leaves the session a third of the TTL to finish its exchange
// and close before anyone else can take the slot.
func (l *lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && !l.released && time.Since(l.written) < l.s.ttl-l.s.ttl/3
}

// renew rewrites the key at the revision this worker last wrote. A conflict means the key expired
// and someone took it, or NATS lost it: the lease is lost and its session retires. Other errors
// leave it to lapse unless a later renewal succeeds.
func (l *lease) renew() {
	l.mu.Lock()
	if l.released || l.lost {
		l.mu.Unlock()
		return
	}
	rev := l.rev
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.s.ctx, l.s.ttl/6)
	defer cancel()
	sent := time.Now()
	next, err := l.s.b.kv.Update(ctx, l.key, l.s.id, rev)
	taken := errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound)
	switch {
	case err == nil, taken:
		l.s.mu.Lock()
		l.s.okLocked()
		l.s.mu.Unlock()
	case l.s.ctx.Err() == nil: // not the worker closing: NATS did not answer
		l.s.failed(err)
	}
	l.mu.Lock()
	switch {
	case err == nil:
		l.rev, l.written = next, sent
	case taken:
		l.lost = true
	}
	releasedMeanwhile := err == nil && l.released
	l.mu.Unlock()
	if releasedMeanwhile {
		// Release ran while this renewal was on its way, and its delete, at the revision before,
		// missed the key this renewal rewrote: delete it at the new one, so that the slot is free
		// at once rather than when the key expires.
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		_ = l.s.b.kv.Delete(dctx, l.key, jetstream.LastRevision(next))
	}
}

// Wanted reports whether another worker has just waited for a slot of this lease's address and
// this worker has not yet given one up for that wait.
func (l *lease) Wanted(open int) bool { return l.s.wanted(l.addr, open, l.max) }

// Wants returns the address's wait channel (smtp.Lease).
func (l *lease) Wants() <-chan struct{} { return l.s.wantsCh(l.addr) }

// Release deletes the key at the revision this worker last wrote, so that a slot lost to someone
// else is never taken from them. A delete that fails leaves the key to expire within the TTL.
func (l *lease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.release(ctx)
}

func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return
	}
	l.released = true
	rev, lost := l.rev, l.lost
	l.mu.Unlock()
	l.s.mu.Lock()
	if l.s.held[l.key] == l {
		delete(l.s.held, l.key)
	}
	l.s.mu.Unlock()
	if lost {
		return
	}
	_ = l.s.b.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
}

// unleased is a session opened without a lease while the bucket could not be asked (fallback).
// It is counted by this worker alone, and retires after its exchange once the bucket is seen
// answering again, so that new sessions take leases as before.
type unleased struct {
	s    *Slots
	addr string
	at   time.Time // when it was opened

	once sync.Once
}

// Valid reports whether the bucket has not been seen answering since the session opened.
func (u *unleased) Valid() bool {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	return !u.s.closed && !u.s.okAt.After(u.at)
}

// Release gives the session's place in the fallback share back, and lets a pool of this worker
// waiting for the address try again at once.
func (u *unleased) Release() {
	u.once.Do(func() {
		u.s.mu.Lock()
		defer u.s.mu.Unlock()
		if u.s.unleased[u.addr]--; u.s.unleased[u.addr] <= 0 {
			delete(u.s.unleased, u.addr)
		}
		u.s.freeLocked(u.addr)
	})
}

// Wanted is always false: another worker cannot wait for a slot that no key holds.
func (u *unleased) Wanted(int) bool { return false }

// Wants returns nil: nobody can ask for this session's place.
func (u *unleased) Wants() <-chan struct{} { return nil }
