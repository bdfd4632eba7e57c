package verify

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/mailvet/mailvet/internal/config"
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
}

// New builds a Verifier from the configuration: the disposable list with the operator's extra
// and allow files, the MX resolver, and the SMTP prober.
func New(cfg config.Config) (*Verifier, error) {
	list, err := disposable.Load(cfg.DisposableExtraFile, cfg.DisposableAllowFile)
	if err != nil {
		return nil, err
	}
	prober, err := smtp.New(smtp.Config{
		Port:       cfg.SMTPPort,
		Helo:       cfg.SMTPHelo,
		MailFrom:   cfg.SMTPMailFrom,
		Timeout:    cfg.SMTPTimeout,
		Proxy:      cfg.SMTPProxy,
		Blocked:    cfg.SMTPBlockedDomains,
		MaxPerHost: cfg.SMTPMaxPerHost,
	})
	if err != nil {
		return nil, err
	}
	return &Verifier{disposable: list, mx: mx.New(mx.Config{Server: cfg.DNSResolver}), prober: prober}, nil
}

// Close ends idle SMTP sessions.
func (v *Verifier) Close() { v.prober.Close() }

// ProbeStats returns the SMTP prober's counters (sessions, round trips, commands).
func (v *Verifier) ProbeStats() smtp.Stats { return v.prober.Stats() }

// Local runs layers 1 and 2 and the signals. final is true when the address failed one of them:
// the result is then complete and needs no worker.
func (v *Verifier) Local(raw string) (r Result, final bool) {
	start := time.Now()
	r, _, final = v.local(raw)
	r.LatencyMS = MS(time.Since(start))
	return r, final
}

func (v *Verifier) local(raw string) (Result, syntax.Address, bool) {
	addr, err := syntax.Parse(raw)
	if err != nil {
		r := Result{Email: strings.TrimSpace(raw)}
		r.Fail(CheckSyntax, OutcomeInvalid)
		return r, addr, true
	}
	// Signals are computed for every syntactically valid address, also those that fail later
	// (DESIGN.md §2, deliberate deviation): a typo'd domain with no MX still gets its suggestion.
	r := Result{
		Email:        addr.String(),
		Role:         signals.IsRole(addr.Local),
		FreeProvider: signals.IsFreeProvider(addr.Domain),
	}
	if s := signals.Suggest(addr.Domain); s != "" {
		r.Suggestion = &s
	}
	if v.disposable.IsDisposable(addr.Domain) {
		r.Disposable = true
		r.Fail(CheckDisposable, OutcomeInvalid)
		return r, addr, true
	}
	// Not final: the layers still to run decide. Until then the honest answer is "unknown".
	r.Apply(OutcomeUnknown)
	return r, addr, false
}

// Verify runs all five layers on one address.
func (v *Verifier) Verify(ctx context.Context, raw string) Result {
	start := time.Now()
	r, addr, final := v.local(raw)
	if !final {
		var hosts []smtp.Host
		if hosts, final = v.routed(ctx, &r, addr.Domain); !final {
			v.probed(&r, v.prober.Probe(ctx, smtp.Request{Addr: addr.String(), Domain: addr.Domain, Hosts: hosts}))
		}
	}
	r.LatencyMS = MS(time.Since(start))
	return r
}

// VerifyBatch verifies raws and returns the results in input order. each, when not nil, is called
// once per address as its result completes — from any goroutine, but never two at once — so a
// caller can stream results in completion order. Addresses whose MX addresses coincide share
// SMTP sessions and pipelined RCPTs; latency_ms counts from the start of the batch.
func (v *Verifier) VerifyBatch(ctx context.Context, raws []string, each func(i int, r Result)) []Result {
	start := time.Now()
	results := make([]Result, len(raws))
	var mu sync.Mutex
	emit := func(i int, r Result) {
		mu.Lock()
		defer mu.Unlock()
		r.LatencyMS = MS(time.Since(start))
		results[i] = r
		if each != nil {
			each(i, r)
		}
	}

	addrs := make([]syntax.Address, len(raws))
	partial := make([]Result, len(raws))
	byDomain := map[string][]int{}
	for i, raw := range raws {
		r, addr, final := v.local(raw)
		if final {
			emit(i, r)
			continue
		}
		addrs[i], partial[i] = addr, r
		byDomain[addr.Domain] = append(byDomain[addr.Domain], i)
	}

	// Layer 3 for every distinct domain at once (bounded), then one ProbeAll so that the prober
	// sees every address bound for one MX address together.
	var (
		wg     sync.WaitGroup
		sem    = make(chan struct{}, 32)
		reqMu  sync.Mutex
		reqs   []smtp.Request
		reqIdx []int
	)
	for domain, idx := range byDomain {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := partial[idx[0]]
			hosts, final := v.routed(ctx, &r, domain)
			for _, i := range idx {
				ri := partial[i]
				ri.Status, ri.Valid, ri.Confidence, ri.FailedCheck = r.Status, r.Valid, r.Confidence, r.FailedCheck
				ri.MXFound, ri.MXHost = r.MXFound, r.MXHost
				partial[i] = ri
				if final {
					emit(i, ri)
					continue
				}
				reqMu.Lock()
				reqs = append(reqs, smtp.Request{Addr: addrs[i].String(), Domain: domain, Hosts: hosts})
				reqIdx = append(reqIdx, i)
				reqMu.Unlock()
			}
		}()
	}
	wg.Wait()
	v.prober.ProbeAll(ctx, reqs, func(k int, pr smtp.Result) {
		i := reqIdx[k]
		r := partial[i]
		v.probed(&r, pr)
		emit(i, r)
	})
	return results
}

// routed runs layer 3 and the blocked-provider rule. final is true when the result is complete
// without a probe; otherwise hosts are the MX hosts to probe.
func (v *Verifier) routed(ctx context.Context, r *Result, domain string) (hosts []smtp.Host, final bool) {
	res, err := v.mx.Lookup(ctx, domain)
	switch {
	case errors.Is(err, mx.ErrNoMX):
		r.Fail(CheckNoMX, OutcomeInvalid)
		return nil, true
	case err != nil:
		// SERVFAIL or a timeout says nothing about the domain: unknown, never invalid.
		r.Apply(OutcomeUnknown)
		return nil, true
	}
	r.MXFound = true
	primary := res.Primary()
	r.MXHost = &primary
	if v.prober.Blocked(domain) {
		r.SMTPBlocked = true
		r.Apply(OutcomeSMTPBlocked)
		return nil, true
	}
	for _, h := range res.Hosts {
		hosts = append(hosts, smtp.Host{Name: h.Name, Addrs: h.Addrs})
	}
	return hosts, false
}

// probed applies layer 4's verdict.
func (v *Verifier) probed(r *Result, pr smtp.Result) {
	switch {
	case pr.Blocked:
		r.SMTPBlocked = true
		r.Apply(OutcomeSMTPBlocked)
	case pr.Verdict == smtp.Deliverable && r.Role:
		r.Apply(OutcomeDeliverableRole)
	case pr.Verdict == smtp.Deliverable:
		r.Apply(OutcomeDeliverable)
	case pr.Verdict == smtp.Undeliverable:
		r.Fail(CheckSMTP, OutcomeUndeliverable)
	case pr.Verdict == smtp.CatchAll:
		r.CatchAll = true
		r.Apply(OutcomeCatchAll)
	default:
		r.Apply(OutcomeUnknown)
	}
}

// MS converts d to latency_ms: milliseconds with nanosecond resolution, so that even the local
// layers' sub-microsecond answers report a real, non-zero time.
func MS(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
