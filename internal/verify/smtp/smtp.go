// Package smtp is layer 4 of the verification pipeline: it asks a domain's mail servers whether
// a mailbox exists (an RCPT probe; no mail is ever sent) and whether the domain accepts any
// local part (catch-all), under the rules of docs/architecture.md, "The verification pipeline".
//
// The prober is built to be polite to the servers it asks and cheap in round trips:
//   - at most MaxPerHost sessions are open to one MX address at a time, whatever the number of
//     domains that share it;
//   - one session serves many addresses: the MAIL FROM transaction stays open for further RCPTs,
//     several RCPTs travel in one write when the server offers PIPELINING, and idle sessions are
//     kept for a few seconds for the next address;
//   - a session is retired before it collects 10 rejected recipients, because Postfix and others
//     slow every reply down after that many errors: one write never carries more RCPTs than the
//     errors it has left could absorb if every one were rejected;
//   - a new session is opened only for the work that the open ones are not expected to take at
//     the rejection rate seen at that MX address, so that a batch does not end with many
//     half-used sessions; one down to its last three errors while every allowed session is open
//     and the queue has work for a fresh one sends its last RCPTs together with QUIT to make
//     room for it;
//   - to an address never reached yet, one session dials first and the others once its banner
//     is in; the first MAIL FROM travels with the RCPTs unless the server offers STARTTLS (it
//     may demand it);
//   - a 452 "too many recipients" after some were taken continues in a new transaction (RSET,
//     MAIL FROM) and the limit is remembered for that address; a 421 "too many connections"
//     keeps the pool to the sessions that work instead of answering unknown;
//   - a failed connection pauses the address briefly (250 ms, doubling up to 30 s), then lets one
//     trial session through (a half-open breaker); a success resets it;
//   - QUIT is sent without waiting for its reply;
//   - providers that block probing are never dialled;
//   - nor is any MX address that is not public unicast (loopback, RFC 1918, CGNAT, link-local,
//     unique-local, multicast, reserved), unless Config.AllowCIDRs lists it: whoever controls a
//     domain's DNS chooses its MX addresses, and must not get the prober to knock on our own
//     network (SSRF). The check is made on the address dialled, at dial time, also through a proxy.
package smtp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/proxy"

	"github.com/mailvet/mailvet/internal/netguard"
)

// CatchAllTTL is how long a domain's catch-all verdict is remembered (docs/architecture.md, "The verification pipeline").
const CatchAllTTL = 6 * time.Hour

// maxErrors is the number of failed commands after which a session is retired. Postfix delays
// every reply by a second once a client has made 10 errors (smtpd_soft_error_limit), so a
// session never risks the tenth.
const maxErrors = 9

// Errors that explain an Unknown verdict.
var (
	ErrTimeout = errors.New("smtp: probe budget exhausted")
	ErrNoHost  = errors.New("smtp: no MX host could be reached")
	ErrBlocked = errors.New("smtp: provider blocks probing")
	ErrClosed  = errors.New("smtp: prober closed")
	// ErrProtocol is a server that took the connection and broke SMTP: a malformed reply, or
	// replies out of turn (docs/architecture.md, "Misbehaving servers").
	ErrProtocol = errors.New("smtp: the server broke the protocol")
	// ErrBusy is a budget that ended before the address was put to any server, while every
	// session its MX address may have (MaxPerHost, fleet-wide with Slots) was in use: the server
	// was not asked (docs/api.md, "Reasons", mail_server_busy). It comes wrapped with ErrTimeout.
	ErrBusy = errors.New("smtp: every session to the MX address was in use")

	// ErrForbiddenAddress explains an Unknown verdict whose MX addresses are all private or
	// reserved (and not in Config.AllowCIDRs): they were not dialled. It wraps
	// netguard.ErrForbiddenAddress's explanation of the address.
	ErrForbiddenAddress = errors.New("smtp: MX address is private or reserved")
)

// Config configures a Prober.
type Config struct {
	Port        int           // SMTP port of every MX host (25 in production)
	Helo        string        // EHLO name
	MailFrom    string        // envelope sender
	Timeout     time.Duration // budget of one probe; 0 means 1500ms
	Proxy       string        // socks5://host:port, or empty to dial directly
	Blocked     []string      // domains never probed, besides the built-in list ("yahoo.*" patterns allowed)
	MaxPerHost  int           // concurrent sessions per MX address; 0 means 20
	IdleTimeout time.Duration // how long an idle session is kept for reuse; 0 means 5s
	// AllowCIDRs are ranges that may be dialled although private or reserved
	// (MAILVET_SMTP_ALLOW_CIDRS), e.g. 127.0.0.0/8 for a loopback test world. Empty in production.
	AllowCIDRs []netip.Prefix
	// Slots, when set, makes MaxPerHost a cap on the sessions of every prober sharing it (the
	// verifier fleet) rather than of this one alone; CatchAll, when set, shares catch-all answers
	// with them. See fleet.go and docs/fleet.md.
	Slots    Slots
	CatchAll Shared
	// Observer, when set, is told every reply the prober reads (observe.go): the metrics of
	// docs/operations.md without this package knowing about Prometheus.
	Observer Observer
}

// Host is an MX host with its addresses, in the order they are to be tried.
type Host struct {
	Name  string
	Addrs []netip.Addr
}

// Request asks whether Addr exists on the mail servers Hosts of Domain.
type Request struct {
	Addr   string // local@domain, already validated
	Domain string
	Hosts  []Host // preference order
}

// Verdict is the probe's answer.
type Verdict int

// The verdicts.
const (
	Unknown       Verdict = iota // no answer could be had (timeout, greylisting, policy block, …)
	Deliverable                  // RCPT accepted and the domain is not catch-all
	Undeliverable                // RCPT rejected: the mailbox does not exist
	CatchAll                     // RCPT accepted, but so is a random local part
)

func (v Verdict) String() string {
	return [...]string{"unknown", "deliverable", "undeliverable", "catch_all"}[v]
}

// Reply is an SMTP reply.
type Reply struct {
	Code     int
	Enhanced string // like "5.1.1", or empty
	Text     string
}

func (r Reply) String() string {
	if r.Enhanced != "" {
		return fmt.Sprintf("%d %s %s", r.Code, r.Enhanced, r.Text)
	}
	return fmt.Sprintf("%d %s", r.Code, r.Text)
}

// Result is the outcome of one probe.
type Result struct {
	Verdict Verdict
	Blocked bool   // the domain is a provider that blocks probing; nothing was dialled
	Host    string // the MX host that answered, if any
	Reply   Reply  // the reply to the address's RCPT, if any
	Err     error  // why the verdict is Unknown when there is no reply to tell
	// MailReply is the permanent refusal of our MAIL FROM that settled the address without a
	// RCPT, if that is what happened: the reply the verdict was decided on when Reply is empty.
	MailReply Reply
}

// Stats count a prober's work.
type Stats struct {
	Sessions   int64 // connections opened
	RoundTrips int64 // times the prober waited for a reply (the banner included)
	Commands   int64 // commands sent
	Dials      int64 // connections attempted (refused and failed ones included)
}

// Prober probes mailboxes. It is safe for concurrent use; call Close to end idle sessions.
type Prober struct {
	cfg     Config
	dialer  proxy.ContextDialer
	blocked blockList
	guard   netguard.Guard

	mu      sync.Mutex
	pools   map[netip.Addr]*pool
	closing chan struct{}
	closed  bool
	running atomic.Int64 // sessions being opened, in use or idle (pool.run), for Close to wait on

	caMu sync.Mutex
	ca   map[string]*caState

	mem memory // what is forgotten when (forget.go); pools under mu, catch-all under caMu

	sessions, roundTrips, commands, dials atomic.Int64
}

// New returns a Prober.
func New(cfg Config) (*Prober, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 1500 * time.Millisecond
	}
	if cfg.MaxPerHost <= 0 {
		cfg.MaxPerHost = 20
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Second
	}
	if cfg.Port == 0 {
		cfg.Port = 25
	}
	if cfg.Helo == "" || !strings.Contains(cfg.MailFrom, "@") {
		return nil, errors.New("smtp: Helo and MailFrom are required")
	}
	guard := netguard.Guard{Allow: cfg.AllowCIDRs}
	// The direct dialer checks the socket's address once more just before connect(2).
	var next proxy.ContextDialer = &net.Dialer{Control: guard.Control}
	p := &Prober{
		cfg:     cfg,
		blocked: newBlockList(cfg.Blocked),
		guard:   guard,
		pools:   map[netip.Addr]*pool{},
		closing: make(chan struct{}),
		ca:      map[string]*caState{},
		mem:     memory{forgetAfter: forgetAfter, sweepEvery: sweepEvery},
	}
	if cfg.Proxy != "" {
		u, err := url.Parse(cfg.Proxy)
		if err != nil {
			return nil, fmt.Errorf("smtp: proxy: %w", err)
		}
		if u.Scheme != "socks5" || u.Host == "" {
			return nil, fmt.Errorf("smtp: proxy must be socks5://host:port, not %q", cfg.Proxy)
		}
		d, err := proxy.FromURL(u, &net.Dialer{})
		if err != nil {
			return nil, fmt.Errorf("smtp: proxy: %w", err)
		}
		cd, ok := d.(proxy.ContextDialer)
		if !ok {
			return nil, fmt.Errorf("smtp: proxy %s cannot dial with a deadline", u.Scheme)
		}
		next = cd
	}
	// The proxy is the operator's and may be private; the addresses it is asked to reach are
	// checked before it hears of them.
	p.dialer = &guardDialer{guard: guard, next: next, lookup: defaultLookup}
	return p, nil
}

// Blocked reports whether domain belongs to a provider that blocks probing.
func (p *Prober) Blocked(domain string) bool { return p.blocked.match(domain) }

// Stats returns the prober's counters.
func (p *Prober) Stats() Stats {
	return Stats{Sessions: p.sessions.Load(), RoundTrips: p.roundTrips.Load(), Commands: p.commands.Load(), Dials: p.dials.Load()}
}

// Close ends idle sessions and makes busy ones end after their current exchange.
func (p *Prober) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.closing)
	pools := make([]*pool, 0, len(p.pools))
	for _, pl := range p.pools {
		pools = append(pools, pl)
	}
	p.mu.Unlock()
	for _, pl := range pools {
		pl.mu.Lock()
		pl.dispatchLocked() // answers the addresses still queued (ErrClosed)
		pl.mu.Unlock()
	}
	// Wait, briefly, for the sessions to end: each sends QUIT and closes its connection, and only
	// then may a fleet-wide slot it holds be given up (docs/fleet.md), so the caller closes the
	// fleet after this. A server that does not answer QUIT is waited for quitWait at most.
	for deadline := time.Now().Add(closeWait); p.running.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// closeWait bounds Close's wait for the sessions to end: a session in an exchange ends by its
// deadline (the probe budget) at the latest, an idle one at once, each after QUIT (quitWait).
const closeWait = 2 * time.Second

// Probe probes one address within the configured budget, counted from now.
func (p *Prober) Probe(ctx context.Context, req Request) Result {
	var out Result
	p.probe(ctx, []Request{req}, time.Now().Add(p.cfg.Timeout), func(_ int, r Result) { out = r })
	return out
}

// ProbeAll probes many addresses, sharing sessions between all those whose MX addresses are the
// same, and calls each (from one goroutine at a time) as every result is known. Each address has
// the configured budget from the moment a session starts working on it; waiting for a free
// session is bounded only by ctx. The time it spends on MX hosts that cannot be reached is
// bounded by the budget too, counted from each failed dial it waited for until a session opens
// at a host that works (job.unreachable), so that silent hosts tried one after the other cannot
// stretch it and a working host's one failed dial costs only that moment.
func (p *Prober) ProbeAll(ctx context.Context, reqs []Request, each func(i int, r Result)) []Result {
	return p.probe(ctx, reqs, time.Time{}, each)
}

type done struct {
	i int
	r Result
}

func (p *Prober) probe(ctx context.Context, reqs []Request, deadline time.Time, each func(int, Result)) []Result {
	results := make([]Result, len(reqs))
	ch := make(chan done, len(reqs))
	p.loadCatchAll(ctx, reqs)
	var jobs []*job
	byPool := map[netip.Addr][]*job{}
	for i, req := range reqs {
		domain := strings.ToLower(req.Domain)
		if p.blocked.match(domain) {
			ch <- done{i, Result{Verdict: Unknown, Blocked: true, Err: ErrBlocked}}
			continue
		}
		var targets []target
		var refused error // the first forbidden address's refusal
		refusedHost := ""
		for _, h := range req.Hosts {
			for _, a := range h.Addrs {
				// Checked here so that a domain whose MX addresses are all forbidden makes no
				// connection at all, and again when dialling (guardDialer).
				if err := p.guard.Check(a); err != nil {
					if refused == nil {
						refused, refusedHost = fmt.Errorf("%w: %w", ErrForbiddenAddress, err), h.Name
					}
					continue
				}
				targets = append(targets, target{host: h.Name, ip: a})
			}
		}
		if len(targets) == 0 {
			if refused != nil {
				ch <- done{i, Result{Verdict: Unknown, Host: refusedHost, Err: refused}}
			} else {
				ch <- done{i, Result{Verdict: Unknown, Err: ErrNoHost}}
			}
			continue
		}
		if known, catchAll := p.catchAllCached(domain); known && catchAll {
			// Any RCPT would be accepted: the answer is known without asking again.
			ch <- done{i, Result{Verdict: CatchAll, Host: targets[0].host}}
			continue
		}
		j := &job{addr: req.Addr, domain: domain, targets: targets, deadline: deadline, queued: time.Now()}
		j.finishFn = func(r Result) { ch <- done{i, r} }
		jobs = append(jobs, j)
		byPool[targets[0].ip] = append(byPool[targets[0].ip], j)
	}
	for ip, js := range byPool {
		p.enqueue(ip, js...)
	}

	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	ctxDone := ctx.Done()
	for range reqs {
		for {
			select {
			case d := <-ch:
				results[d.i] = d.r
				if each != nil {
					each(d.i, d.r)
				}
			case <-timeout:
				timeout = nil
				for _, j := range jobs {
					j.finish(j.budgetEnded(ErrTimeout))
				}
				continue
			case <-ctxDone:
				ctxDone = nil
				for _, j := range jobs {
					j.finish(j.budgetEnded(fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())))
				}
				continue
			}
			break
		}
	}
	return results
}

func (p *Prober) pool(ip netip.Addr) *pool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, ok := p.pools[ip]
	if !ok {
		p.forgetPoolsLocked(time.Now())
		pl = &pool{p: p, ip: ip, addr: netip.AddrPortFrom(ip, uint16(p.cfg.Port)).String()}
		p.pools[ip] = pl
	}
	return pl
}

// failover moves j to its next MX address after err, or ends it when there is none.
func (p *Prober) failover(j *job, err error) {
	if now := time.Now(); j.expired(now) || j.unreachable(now, p.cfg.Timeout) {
		j.finish(Result{Verdict: Unknown, Err: ErrTimeout})
		return
	}
	if !forbidden(err) {
		j.reached = true
		j.asked.Store(true)
	}
	j.next++
	if j.next >= len(j.targets) {
		if !j.reached && forbidden(err) {
			// Every address was refused by the dial-time check: nothing was probed.
			j.finish(Result{Verdict: Unknown, Host: j.targets[len(j.targets)-1].host, Err: err})
			return
		}
		r := Result{Verdict: Unknown, Err: fmt.Errorf("%w: %w", ErrNoHost, err)}
		var be *bannerError
		if errors.As(err, &be) {
			// The last host took the connection and greeted with a refusal (421 busy, 554 no
			// service for us): that reply is the answer, so its reason is the reply's, not
			// "connection refused".
			r.Host, r.Reply = j.targets[len(j.targets)-1].host, be.r
		}
		j.finish(r)
		return
	}
	p.enqueue(j.targets[j.next].ip, j)
}

// target is one address of one MX host.
type target struct {
	host string
	ip   netip.Addr
}

// job is one address on its way through the pools.
type job struct {
	addr, domain string
	targets      []target
	next         int       // index of the target being tried
	deadline     time.Time // zero until a session first works on it (ProbeAll)
	queued       time.Time // when it was handed to the prober
	// unreachedSince is when the stretch it is spending on MX hosts that cannot be reached began
	// (a dial it waited for failed), zero while it waits at a host that works; unreachedFor is
	// the time of its earlier stretches. Together they are bounded by the budget (unreachable).
	unreachedSince time.Time
	unreachedFor   time.Duration
	attempts       int   // times it was handed back unanswered
	lastReply      Reply // the 421 it was last handed back after, if any: its answer when attempts run out
	lastErr        error // the failure of the session it was last handed back from, if any
	reached        bool  // some target failed for a reason other than a forbidden address
	// at is the pool it waits in, set while queued; asked is set once a server was tried for it
	// (it went out in an exchange, or a dial it waited for failed). Both are read when its budget
	// ends, by whichever goroutine ends it (budgetEnded).
	at       atomic.Pointer[pool]
	asked    atomic.Bool
	finishFn func(Result)
	finished atomic.Bool
}

func (j *job) finish(r Result) {
	if j.finished.CompareAndSwap(false, true) {
		j.finishFn(r)
	}
}

// budgetEnded is j's answer when its budget (err, a timeout) ends before it has one: ErrBusy
// when no server was tried for it and its MX address had every session it may have in use.
func (j *job) budgetEnded(err error) Result {
	if pl := j.at.Load(); pl != nil && !j.asked.Load() && pl.busy() {
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return Result{Verdict: Unknown, Err: err}
}

func (j *job) expired(now time.Time) bool { return !j.deadline.IsZero() && !now.Before(j.deadline) }

// unreachable reports whether j has spent its budget on MX hosts that could not be reached.
func (j *job) unreachable(now time.Time, budget time.Duration) bool {
	spent := j.unreachedFor
	if !j.unreachedSince.IsZero() {
		spent += now.Sub(j.unreachedSince)
	}
	return spent > 0 && spent >= budget
}

// unreachableEnd is when j's budget for unreachable MX hosts ends if its current stretch goes on.
func (j *job) unreachableEnd(budget time.Duration) time.Time {
	return j.unreachedSince.Add(budget - j.unreachedFor)
}

// reachedHost ends j's current stretch on unreachable hosts: it waits at a host that works now.
func (j *job) reachedHost(now time.Time) {
	if !j.unreachedSince.IsZero() {
		j.unreachedFor += now.Sub(j.unreachedSince)
		j.unreachedSince = time.Time{}
	}
}

func (j *job) host() string { return j.targets[j.next].host }

// caState is what is known about a domain's catch-all behaviour.
type caState struct {
	known    bool
	catchAll bool
	expires  time.Time
	inflight *caProbe // a random-local-part RCPT on its way, if any
}

// caProbe is one random-local-part RCPT; done is closed when its answer is in.
type caProbe struct {
	domain  string
	local   string
	done    chan struct{}
	outcome caOutcome
	// reply is the probe's 4xx or 5xx reply when it said nothing about the domain (deferred, or
	// refused by policy); written before done is closed.
	reply  Reply
	reasks int // times asked again after a recipient limit (pool.reask); guarded by the pool's mu
}

// resolved reports whether cp's answer is in.
func (cp *caProbe) resolved() bool {
	select {
	case <-cp.done:
		return true
	default:
		return false
	}
}

type caOutcome int

const (
	caInconclusive caOutcome = iota
	caYes
	caNo
)

func (p *Prober) catchAllCached(domain string) (known, catchAll bool) {
	p.caMu.Lock()
	defer p.caMu.Unlock()
	st := p.ca[domain]
	if st == nil || !st.known || time.Now().After(st.expires) {
		return false, false
	}
	return true, st.catchAll
}

// catchAllFor tells a session what to do about j's domain: nothing (known), send a probe
// (claim is non-nil and this session owns it), or wait for someone else's (wait non-nil).
// room is the number of RCPTs the session can still add; ok reports whether the job fits. With
// alone, a room of one that cannot fit the probe beside the job takes the probe by itself
// (claim non-nil, ok false): the job follows in a later exchange (pool.fillLocked).
func (p *Prober) catchAllFor(domain string, room int, alone bool) (known, catchAll bool, claim, wait *caProbe, ok bool) {
	p.caMu.Lock()
	defer p.caMu.Unlock()
	st := p.caStateLocked(domain)
	if st.known && time.Now().Before(st.expires) {
		return true, st.catchAll, nil, nil, room >= 1
	}
	if st.inflight != nil {
		return false, false, nil, st.inflight, room >= 1
	}
	if room < 1 || room < 2 && !alone {
		return false, false, nil, nil, false
	}
	st.inflight = &caProbe{domain: domain, local: probeLocal(domain), done: make(chan struct{})}
	return false, false, st.inflight, nil, room >= 2
}

// caStateLocked is domain's catch-all state, created empty when there is none; p.caMu is held.
func (p *Prober) caStateLocked(domain string) *caState {
	st := p.ca[domain]
	if st == nil {
		p.forgetCatchAllLocked(time.Now())
		st = &caState{}
		p.ca[domain] = st
	}
	return st
}

func (p *Prober) resolveCatchAll(cp *caProbe, o caOutcome) { p.resolveCatchAllWith(cp, o, Reply{}) }

// resolveCatchAllWith is resolveCatchAll with the probe's reply when it said nothing about the
// domain (caProbe.reply). The first resolution counts: a probe re-asked after a recipient limit
// may also be ended by its deadline's timer (pool.reask).
func (p *Prober) resolveCatchAllWith(cp *caProbe, o caOutcome, rep Reply) {
	p.caMu.Lock()
	defer p.caMu.Unlock()
	select {
	case <-cp.done:
		return // already resolved
	default:
	}
	cp.outcome, cp.reply = o, rep
	close(cp.done)
	st := p.caStateLocked(cp.domain)
	if st.inflight == cp {
		st.inflight = nil
	}
	if o != caInconclusive {
		st.known, st.catchAll, st.expires = true, o == caYes, time.Now().Add(CatchAllTTL)
		p.shareCatchAll(cp.domain, st.catchAll, st.expires)
	}
}

// accepted finishes a job whose RCPT was accepted, once its domain's catch-all answer is in.
func (p *Prober) accepted(j *job, known, catchAll bool, cp *caProbe, host string, rep Reply) {
	verdict := func(o caOutcome) Result {
		switch o {
		case caYes:
			return Result{Verdict: CatchAll, Host: host, Reply: rep}
		case caNo:
			return Result{Verdict: Deliverable, Host: host, Reply: rep}
		}
		if cp != nil && cp.reply.Code != 0 {
			// The probe was deferred, greylisted most often, or refused by policy: the address's
			// answer is that reply, so that its reason says so (greylisted, policy_blocked, …)
			// and, when greylisted, an async job is probed again later (when the probe's local
			// part, the same for the domain every time, has passed the greylist too).
			return Result{Verdict: Unknown, Host: host, Reply: cp.reply}
		}
		return Result{Verdict: Unknown, Host: host, Reply: rep, Err: errors.New("smtp: catch-all check inconclusive")}
	}
	if known {
		o := caNo
		if catchAll {
			o = caYes
		}
		j.finish(verdict(o))
		return
	}
	select {
	case <-cp.done:
		j.finish(verdict(cp.outcome))
		return
	default:
	}
	// Another session's probe of this domain is still on its way; wait for it without holding
	// up this session.
	go func() {
		t := time.NewTimer(max(time.Until(j.deadline), 0))
		defer t.Stop()
		select {
		case <-cp.done:
			j.finish(verdict(cp.outcome))
		case <-t.C:
			j.finish(Result{Verdict: Unknown, Host: host, Reply: rep, Err: ErrTimeout})
		}
	}()
}

// probeLocal is the local part of domain's catch-all probe: one that no mailbox has, and the same
// for the domain every time and on every worker. Greylisting daemons let a (client, sender,
// recipient) triple in on its retry; a probe with a new local part each time would be greylisted
// on every re-probe of an async job, so the job could never get past "deferred".
func probeLocal(domain string) string {
	sum := sha256.Sum256([]byte("mailvet catch-all probe\x00" + domain))
	return "mv" + hex.EncodeToString(sum[:8])
}

// SenderRefused reports a reply to RCPT that refuses our envelope sender, not the recipient:
// enhanced code X.1.7 (bad sender's mailbox address) or X.1.8 (bad sender's system address) of
// RFC 3463, or words that name the sender's refusal whatever the enhanced code: Postfix's "Sender
// address rejected" (which it sends under 5.1.0, 5.7.1, 5.7.27 as well) and Exim's "Sender verify
// failed". Postfix checks the sender at RCPT time by default (smtpd_delay_reject), so a 553 5.1.8
// there says nothing about the mailbox, and would say the same of every address of the server.
func SenderRefused(r Reply) bool {
	if r.Code/100 != 4 && r.Code/100 != 5 {
		return false
	}
	return senderRefused(r.Enhanced, strings.ToLower(r.Text))
}

// senderRefused is SenderRefused on a reply's enhanced code and its lower-cased text.
func senderRefused(enhanced, lower string) bool {
	switch enhanced[min(len(enhanced), 1):] {
	case ".1.7", ".1.8":
		return true
	}
	return strings.Contains(lower, "sender address rejected") || strings.Contains(lower, "sender verify failed")
}

// parseEnhanced splits "5.1.1 text" into the enhanced code and the rest, when the code's class
// agrees with the reply code's.
func parseEnhanced(code int, text string) (string, string) {
	first, rest, _ := strings.Cut(text, " ")
	parts := strings.Split(first, ".")
	if len(parts) != 3 || parts[0] != strconv.Itoa(code/100) {
		return "", text
	}
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 999 {
			return "", text
		}
	}
	return first, rest
}
