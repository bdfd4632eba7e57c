package verify

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/disposable"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/signals"
	"github.com/mailvet/mailvet/internal/verify/smtp"
	"github.com/mailvet/mailvet/internal/verify/syntax"
)

// Verifier runs the pipeline. It is safe for concurrent use; Close ends its idle SMTP sessions.
type Verifier struct {
	disposable *disposable.List
	mx         *mx.Resolver
	prober     *smtp.Prober
	obs        Observer // nil: nothing is timed or counted (observe.go)

	// finished, when not nil, is given every result as the last act of the per-address step,
	// and its return value becomes the result. Only tests set it: it stands in for a layer that
	// sets a new field, and shows that whatever the step writes reaches Local, Verify and
	// VerifyBatch alike without an edit to any of them. It takes and returns a value rather than
	// a pointer so that Local's address state does not escape to the heap.
	finished func(verdict.Result) verdict.Result
}

// Config is what the pipeline needs: the operator's disposable-domain files and the settings of
// its two network layers. The binaries build it from the process configuration
// (verifyworker.EngineConfig).
type Config struct {
	// DisposableExtraFile and DisposableAllowFile extend the embedded disposable list and make
	// exceptions to it (docs/operations.md, "Data lists"); empty for none.
	DisposableExtraFile string
	DisposableAllowFile string
	MX                  mx.Config
	SMTP                smtp.Config
}

// New builds a Verifier from cfg: the disposable list with the operator's extra and allow files,
// the MX resolver, and the SMTP prober.
func New(cfg Config) (*Verifier, error) { return newWithObserver(cfg, nil) }

// Fleet is what a verifier worker shares with the others of its deployment (internal/fleet,
// docs/fleet.md): the per-MX-address session cap, and the MX and catch-all answers. The zero
// Fleet shares nothing: the worker keeps its own caps and caches, as the `check` command does.
type Fleet struct {
	Slots    smtp.Slots
	MX       mx.Shared
	CatchAll smtp.Shared
}

// Join makes v a worker of a fleet: its MAILVET_SMTP_MAX_PER_HOST then bounds the sessions of
// every worker sharing f.Slots together, and its MX and catch-all answers are shared. It must be
// called before v verifies anything.
func (v *Verifier) Join(f Fleet) {
	v.prober.Share(f.Slots, f.CatchAll)
	v.mx.Share(f.MX)
}

// OpenSessions calls fn with every MX address the prober has sessions open to and their number
// (the mailvet_smtp_sessions gauge).
func (v *Verifier) OpenSessions(fn func(ip netip.Addr, n int)) { v.prober.OpenSessions(fn) }

// newWithObserver is New with the SMTP prober's observer (nil for none); NewObserved sets the rest.
func newWithObserver(cfg Config, obs smtp.Observer) (*Verifier, error) {
	list, err := disposable.Load(cfg.DisposableExtraFile, cfg.DisposableAllowFile)
	if err != nil {
		return nil, err
	}
	sc := cfg.SMTP
	if obs != nil {
		sc.Observer = obs
	}
	prober, err := smtp.New(sc)
	if err != nil {
		return nil, err
	}
	return &Verifier{disposable: list, mx: mx.New(cfg.MX), prober: prober}, nil
}

// Close ends idle SMTP sessions.
func (v *Verifier) Close() { v.prober.Close() }

// ProbeStats returns the SMTP prober's counters (sessions, round trips, commands).
func (v *Verifier) ProbeStats() smtp.Stats { return v.prober.Stats() }

// Local runs the layers that need no network — syntax and disposable — and the signals. final
// is true when the address failed one of them: the result is then complete and needs no worker.
// Otherwise the result is the pending one, with the signals filled in and status "unknown".
func (v *Verifier) Local(raw string) (r verdict.Result, final bool) {
	start := time.Now()
	a := newAddress(raw)
	// Local never does network I/O: it stops where the step first asks for it, and finishes the
	// pending result with the code that ends every address's step.
	final = v.step(&a) == needNothing
	if !final {
		v.finish(&a)
	}
	r = a.r
	r.LatencyMS = MS(time.Since(start))
	return r, final
}

// Verify runs all five layers on one address. It does the network I/O the step asks for, one
// request at a time.
func (v *Verifier) Verify(ctx context.Context, raw string) verdict.Result {
	start := time.Now()
	a := newAddress(raw)
	for n := v.step(&a); n != needNothing; n = v.step(&a) {
		switch n {
		case needMX:
			a.route = v.lookup(ctx, a.addr.Domain)
		case needProbe:
			probeStart := v.clock()
			a.probe(v.prober.Probe(ctx, a.request()))
			v.layerDone(ObservedSMTP, probeStart)
		}
	}
	r := a.r
	r.LatencyMS = MS(time.Since(start))
	return r
}

// VerifyBatch verifies raws and returns the results in input order. each, when not nil, is called
// once per address as its result completes — from any goroutine, but never two at once — so a
// caller can stream results in completion order. Addresses whose MX addresses coincide share
// SMTP sessions and pipelined RCPTs; latency_ms counts from the start of the batch.
//
// Every address goes through the same step as in Verify. What the batch adds is only the
// grouping of the network I/O the steps ask for: one MX look-up per distinct domain, and one
// ProbeAll for every address that needs a probe, so that the prober sees all addresses bound for
// one mail server together and shares its sessions between them.
func (v *Verifier) VerifyBatch(ctx context.Context, raws []string, each func(i int, r verdict.Result)) []verdict.Result {
	start := time.Now()
	results := make([]verdict.Result, len(raws))
	as := make([]address, len(raws))

	var (
		ioMu     sync.Mutex // guards the I/O to do
		byDomain = map[string][]int{}
		reqs     []smtp.Request
		reqIdx   []int
		emitMu   sync.Mutex // guards results and makes each's calls one at a time
	)
	// next files address i under the I/O its step asks for, or emits its result when the step
	// has finished it. The layers run in a fixed order, so every MX look-up is asked for before
	// the look-ups are done below, and every probe before ProbeAll. Emitting has a lock of its
	// own so that a slow each does not hold up the MX phase's goroutines.
	next := func(i int, n need) {
		switch n {
		case needMX:
			ioMu.Lock()
			byDomain[as[i].addr.Domain] = append(byDomain[as[i].addr.Domain], i)
			ioMu.Unlock()
		case needProbe:
			req := as[i].request()
			ioMu.Lock()
			reqs = append(reqs, req)
			reqIdx = append(reqIdx, i)
			ioMu.Unlock()
		default:
			emitMu.Lock()
			defer emitMu.Unlock()
			r := as[i].r
			r.LatencyMS = MS(time.Since(start))
			results[i] = r
			if each != nil {
				each(i, r)
			}
		}
	}

	for i, raw := range raws {
		as[i] = newAddress(raw)
		next(i, v.step(&as[i]))
	}

	// Layer 3 for every distinct domain at once (bounded). The addresses of one domain share the
	// look-up's answer, and each then takes its own step with it.
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
		panicMu  sync.Mutex
		panicked any // the first panic of a look-up goroutine
	)
	for domain, idx := range byDomain {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A panic here would end the process, out of the caller's reach: a list runner
			// recovers a chunk's panic and counts it as the chunk's failure (docs/lists.md,
			// "Outages and failures"), where a crash would come back with the redelivered chunk
			// to every worker in turn. It is handed to the caller's goroutine instead.
			defer func() {
				if p := recover(); p != nil {
					panicMu.Lock()
					if panicked == nil {
						panicked = p
					}
					panicMu.Unlock()
				}
			}()
			rt := v.lookup(ctx, domain)
			for _, i := range idx {
				as[i].route = rt
				next(i, v.step(&as[i]))
			}
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked) // before any probe: the batch has no result to give
	}

	// Layer 4 for every address that still needs it, in one ProbeAll.
	probeStart := v.clock()
	v.prober.ProbeAll(ctx, reqs, func(k int, pr smtp.Result) {
		v.layerDone(ObservedSMTP, probeStart)
		i := reqIdx[k]
		as[i].probe(pr)
		next(i, v.step(&as[i]))
	})
	return results
}

// layer is a stage of the per-address step, in pipeline order.
type layer uint8

const (
	layerSyntax layer = iota
	layerDisposable
	layerMX
	layerSMTP
	layerSignals // also sets the verdict; every address ends here
	layerDone
)

// need is what the step waits for before it can go on with an address.
type need uint8

const (
	needNothing need = iota // the result is complete
	needMX                  // the MX look-up of the address's domain (route)
	needProbe               // the SMTP probe of the address (probe)
)

// address is one address on its way through the pipeline: the result the layers fill in, and what
// each layer leaves for the next. The network layers take their answers from route and pr,
// which the caller sets when the step asks for them; this is what lets Verify do the I/O for one
// address and VerifyBatch for many at once while every decision stays in the step.
type address struct {
	raw     string
	r       verdict.Result
	addr    syntax.Address  // layer 1's parse, valid from layerDisposable on
	parsed  bool            // layer 1 passed: the signals apply
	outcome verdict.Outcome // the row of the confidence table the check layers chose
	next    layer

	route  *route      // layer 3's answer; nil until looked up
	probed bool        // layer 4's answer is in pr
	pr     smtp.Result // layer 4's answer
}

// newAddress starts raw's way through the pipeline. Until a layer decides, the honest answer is
// "unknown": that is what Local reports for an address that still needs the network.
func newAddress(raw string) address {
	return address{raw: raw, outcome: verdict.OutcomeUnknown}
}

// route is the answer of one MX look-up. VerifyBatch shares it between the addresses of a domain,
// so it holds only what the look-up returned, never a decision about an address.
type route struct {
	res   mx.Result
	err   error
	hosts []smtp.Host // res's hosts in the prober's terms, in preference order
}

// lookup runs layer 3's network I/O for domain.
func (v *Verifier) lookup(ctx context.Context, domain string) *route {
	start := v.clock()
	res, err := v.mx.Lookup(ctx, domain)
	v.layerDone(ObservedMX, start)
	rt := &route{res: res, err: err}
	if err == nil {
		rt.hosts = make([]smtp.Host, len(res.Hosts))
		for i, h := range res.Hosts {
			rt.hosts[i] = smtp.Host{Name: h.Name, Addrs: h.Addrs}
		}
	}
	return rt
}

// probe records layer 4's answer for a.
func (a *address) probe(pr smtp.Result) { a.pr, a.probed = pr, true }

// request is the SMTP probe layer 4 asks for.
func (a *address) request() smtp.Request {
	return smtp.Request{Addr: a.addr.String(), Domain: a.addr.Domain, Hosts: a.route.hosts}
}

// end ends the check layers with outcome o for reason why: the address goes on to the signals.
func (a *address) end(o verdict.Outcome, why verdict.Reason) {
	a.outcome, a.next = o, layerSignals
	a.r.Reason = why
}

// fail ends the check layers because check c failed.
func (a *address) fail(c verdict.Check, o verdict.Outcome, why verdict.Reason) {
	a.r.FailedCheck = &c
	a.end(o, why)
}

// step is the one place where an address's layers run and its result is decided; Local, Verify
// and VerifyBatch all call it. It runs a's layers in order from where a stopped, until one needs
// network I/O whose answer a does not have yet (it then returns what it needs, and the caller
// sets the answer and calls step again), or until the result is complete (needNothing). The first
// check that fails ends the check layers; the signals and the verdict come last, for every
// address.
func (v *Verifier) step(a *address) need {
	for {
		switch a.next {
		case layerSyntax:
			start := v.clock()
			addr, err := syntax.Parse(a.raw)
			v.layerDone(ObservedSyntax, start)
			if err != nil {
				a.r.Email = strings.Trim(a.raw, " \t") // as layer 1 trims (docs/api.md, "The verify result")
				a.fail(verdict.CheckSyntax, verdict.OutcomeInvalid, verdict.ReasonInvalidSyntax)
				continue
			}
			a.addr, a.parsed = addr, true
			a.r.Email = addr.String()
			a.next = layerDisposable

		case layerDisposable:
			start := v.clock()
			disposable := v.disposable.IsDisposable(a.addr.Domain)
			v.layerDone(ObservedDisposable, start)
			if disposable {
				a.r.Disposable = true
				a.fail(verdict.CheckDisposable, verdict.OutcomeInvalid, verdict.ReasonDisposable)
				continue
			}
			a.next = layerMX

		case layerMX:
			if a.route == nil {
				return needMX
			}
			rt := a.route
			switch {
			case errors.Is(rt.err, mx.ErrNullMX):
				a.fail(verdict.CheckNoMX, verdict.OutcomeInvalid, verdict.ReasonNullMX)
				continue
			case errors.Is(rt.err, mx.ErrNoMX):
				a.fail(verdict.CheckNoMX, verdict.OutcomeInvalid, verdict.ReasonNoMX)
				continue
			case rt.err != nil:
				// SERVFAIL, REFUSED or a timeout says nothing about the domain: unknown, never
				// invalid.
				a.end(verdict.OutcomeUnknown, verdict.ReasonDNSError)
				continue
			}
			// An implicit MX (RFC 5321 §5.1: no MX records, but an A/AAAA record) is a mail
			// route like any other: mx_found is true and mx_host is the domain itself.
			a.r.MXFound = true
			primary := rt.res.Primary()
			a.r.MXHost = &primary
			if v.prober.Blocked(a.addr.Domain) {
				// A provider that blocks or falsifies probes is never dialled: a probe would
				// only cost the worker's address its reputation.
				a.r.SMTPBlocked = true
				a.end(verdict.OutcomeSMTPBlocked, verdict.ReasonProviderBlocksProbes)
				continue
			}
			a.next = layerSMTP

		case layerSMTP:
			if !a.probed {
				return needProbe
			}
			pr := a.pr
			why := probeReason(pr)
			a.r.SMTPReply = replyOf(pr.Reply)
			if a.r.SMTPReply == nil {
				a.r.SMTPReply = replyOf(pr.MailReply)
			}
			switch {
			case pr.Blocked:
				a.r.SMTPBlocked = true
				a.end(verdict.OutcomeSMTPBlocked, why)
			case pr.Verdict == smtp.Deliverable:
				a.end(verdict.OutcomeDeliverable, why)
			case pr.Verdict == smtp.Undeliverable:
				a.fail(verdict.CheckSMTP, verdict.OutcomeUndeliverable, why)
			case pr.Verdict == smtp.CatchAll:
				a.r.CatchAll = true
				a.end(verdict.OutcomeCatchAll, why)
			default:
				a.end(verdict.OutcomeUnknown, why)
				if why == verdict.ReasonGreylisted {
					a.r.RetryAfter = RetryHint(pr.Reply.Text)
				}
			}

		case layerSignals:
			v.finish(a)
			a.next = layerDone
			if v.obs != nil {
				v.obs.Result(a.r.Status, a.r.Reason)
			}

		default:
			return needNothing
		}
	}
}

// finish runs the signals and sets the verdict. The step calls it once the check layers are
// over; Local calls it on an address that still needs the network, whose outcome is then still
// "unknown".
func (v *Verifier) finish(a *address) {
	// Signals are computed for every syntactically valid address, also one that fails a later
	// check: they do not decide validity, and a typo'd domain with no MX is exactly the one whose
	// suggestion the caller needs.
	if a.parsed {
		a.r.Role = signals.IsRole(a.addr.Local)
		a.r.FreeProvider = signals.IsFreeProvider(a.addr.Domain)
		if s := signals.Suggest(a.addr.Domain); s != "" && a.suggest(s) {
			a.r.Suggestion = &s
		}
	}
	o := a.outcome
	if o == verdict.OutcomeDeliverable && a.r.Role {
		// The confidence table has a row of its own for a deliverable role address, and only
		// the signals know whether the address is one.
		o = verdict.OutcomeDeliverableRole
	}
	a.r.Apply(o)
	if v.finished != nil {
		a.r = v.finished(a.r)
	}
}

// suggest decides whether the typo suggestion s for a's domain is worth showing. A domain without
// a mail route (no MX, a DNS failure), or whose route is not known yet (Local), keeps every
// suggestion: that is the typo the caller needs to hear about. A domain that receives mail keeps
// only a suggestion whose target is a known mailbox provider — a near miss like gmial.com ⇒
// gmail.com or yahoo.cm ⇒ yahoo.com, typo domains that often do have a (catch-all) MX — and
// loses mailcheck's TLD swaps of a working company domain (company.test ⇒ company.de), which
// are noise, above all next to a mailbox the server just confirmed.
func (a *address) suggest(s string) bool {
	return !a.r.MXFound || signals.IsProvider(s)
}

// MS converts d to latency_ms: milliseconds with nanosecond resolution, so that even the local
// layers' sub-microsecond answers report a real, non-zero time.
func MS(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
