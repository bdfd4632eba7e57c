// Package mx is layer 3 of the verification pipeline: it looks up a domain's MX hosts, in
// preference order, and their addresses, against one configured resolver (docs/architecture.md, "The verification pipeline").
//
// Answers are cached — positive ones for 6 hours, "this domain takes no mail" for 15 minutes —
// and concurrent look-ups of one domain share a single query. Temporary failures (SERVFAIL, a
// timeout) are never cached and are reported as ErrTemporary, so that the pipeline answers
// "unknown" rather than calling a real domain invalid because a resolver hiccupped.
package mx

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// Cache lifetimes of docs/architecture.md, "The verification pipeline". The positive lifetime is deliberately not capped by the
// record TTL: the design fixes 6 hours, trading freshness for far fewer queries.
const (
	PositiveTTL = 6 * time.Hour
	NegativeTTL = 15 * time.Minute
)

// ErrNoMX means the domain accepts no mail: NXDOMAIN, no MX records, or a null MX (RFC 7505).
// An A record alone does not count as an implicit MX (no MX means no_mx: docs/architecture.md, "The verification pipeline").
var ErrNoMX = errors.New("no MX records")

// ErrTemporary means the answer could not be had now (SERVFAIL, REFUSED, timeout).
var ErrTemporary = errors.New("temporary DNS failure")

// Host is one MX host with the addresses it resolves to.
type Host struct {
	Name  string // without the trailing dot
	Pref  uint16
	Addrs []netip.Addr
}

// Result is a domain's MX hosts, most preferred first.
type Result struct {
	Hosts []Host
}

// Primary is the most preferred MX host name.
func (r Result) Primary() string {
	if len(r.Hosts) == 0 {
		return ""
	}
	return r.Hosts[0].Name
}

// Config configures a Resolver.
type Config struct {
	Server  string        // resolver host:port
	Timeout time.Duration // per query attempt; 0 means 2s
	Retries int           // extra UDP attempts after a timeout; 0 means 1
	// MaxEntries bounds the cache; 0 means 100,000 domains.
	MaxEntries int
}

// Resolver looks up and caches MX records. It is safe for concurrent use.
type Resolver struct {
	cfg Config
	udp *dns.Client
	tcp *dns.Client
	sf  singleflight.Group
	now func() time.Time

	mu    sync.Mutex
	cache map[string]entry
}

type entry struct {
	res     Result
	err     error // nil or ErrNoMX
	expires time.Time
}

// New returns a Resolver that asks cfg.Server.
func New(cfg Config) *Resolver {
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 1
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 100_000
	}
	return &Resolver{
		cfg:   cfg,
		udp:   &dns.Client{Net: "udp", Timeout: cfg.Timeout, UDPSize: 1232},
		tcp:   &dns.Client{Net: "tcp", Timeout: cfg.Timeout},
		now:   time.Now,
		cache: map[string]entry{},
	}
}

// Lookup returns domain's MX hosts, or an error wrapping ErrNoMX or ErrTemporary.
func (r *Resolver) Lookup(ctx context.Context, domain string) (Result, error) {
	domain = strings.ToLower(strings.TrimSuffix(domain, "."))
	if res, err, ok := r.cached(domain); ok {
		return res, err
	}
	// The shared look-up must not die with the first caller's context: the others still want
	// the answer. It is bounded by the resolver's own timeouts instead.
	ch := r.sf.DoChan(domain, func() (any, error) {
		res, err := r.lookup(context.WithoutCancel(ctx), domain)
		r.store(domain, res, err)
		return res, err
	})
	select {
	case out := <-ch:
		res, _ := out.Val.(Result)
		return res, out.Err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("%w: %s: %v", ErrTemporary, domain, ctx.Err())
	}
}

func (r *Resolver) cached(domain string) (Result, error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.cache[domain]
	if !ok || r.now().After(e.expires) {
		return Result{}, nil, false
	}
	return e.res, e.err, true
}

func (r *Resolver) store(domain string, res Result, err error) {
	var ttl time.Duration
	switch {
	case err == nil:
		ttl = PositiveTTL
	case errors.Is(err, ErrNoMX):
		ttl = NegativeTTL
	default:
		return // temporary failures are asked again next time
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if len(r.cache) >= r.cfg.MaxEntries {
		for k, e := range r.cache {
			if now.After(e.expires) {
				delete(r.cache, k)
			}
		}
		// Still full of live entries: drop arbitrary ones rather than grow without bound.
		for k := range r.cache {
			if len(r.cache) < r.cfg.MaxEntries {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[domain] = entry{res: res, err: err, expires: now.Add(ttl)}
}

func (r *Resolver) lookup(ctx context.Context, domain string) (Result, error) {
	resp, err := r.query(ctx, domain, dns.TypeMX)
	if err != nil {
		return Result{}, err
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return Result{}, fmt.Errorf("%w: %s: NXDOMAIN", ErrNoMX, domain)
	default:
		return Result{}, fmt.Errorf("%w: %s: %s", ErrTemporary, domain, dns.RcodeToString[resp.Rcode])
	}

	var hosts []Host
	for _, rr := range resp.Answer {
		mx, ok := rr.(*dns.MX)
		if !ok {
			continue // a CNAME on the way, for instance
		}
		name := strings.ToLower(strings.TrimSuffix(mx.Mx, "."))
		if name == "" {
			continue // a null MX (RFC 7505) names no host
		}
		hosts = append(hosts, Host{Name: name, Pref: mx.Preference})
	}
	if len(hosts) == 0 {
		return Result{}, fmt.Errorf("%w: %s", ErrNoMX, domain)
	}
	slices.SortStableFunc(hosts, func(a, b Host) int { return int(a.Pref) - int(b.Pref) })

	// Most servers send the MX hosts' addresses along in the additional section; use them and
	// ask separately only for hosts that came without, so a typical look-up is one round trip.
	glue := map[string][]netip.Addr{}
	for _, rr := range resp.Extra {
		switch a := rr.(type) {
		case *dns.A:
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				n := strings.ToLower(strings.TrimSuffix(a.Hdr.Name, "."))
				glue[n] = append(glue[n], ip)
			}
		case *dns.AAAA:
			if ip, ok := netip.AddrFromSlice(a.AAAA); ok {
				n := strings.ToLower(strings.TrimSuffix(a.Hdr.Name, "."))
				glue[n] = append(glue[n], ip)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range hosts {
		if g := glue[hosts[i].Name]; len(g) > 0 {
			hosts[i].Addrs = g
			continue
		}
		wg.Add(1)
		go func(h *Host) {
			defer wg.Done()
			h.Addrs = r.addrs(ctx, h.Name)
		}(&hosts[i])
	}
	wg.Wait()
	return Result{Hosts: hosts}, nil
}

// addrs resolves a host's A and AAAA records. A host that does not resolve keeps an empty list:
// the prober then moves on to the next MX host.
func (r *Resolver) addrs(ctx context.Context, host string) []netip.Addr {
	var (
		mu  sync.Mutex
		out []netip.Addr
		wg  sync.WaitGroup
	)
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.query(ctx, host, t)
			if err != nil || resp.Rcode != dns.RcodeSuccess {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, rr := range resp.Answer {
				switch a := rr.(type) {
				case *dns.A:
					if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
						out = append(out, ip)
					}
				case *dns.AAAA:
					if ip, ok := netip.AddrFromSlice(a.AAAA); ok {
						out = append(out, ip)
					}
				}
			}
		}()
	}
	wg.Wait()
	// IPv4 first keeps the order stable whichever answer came back first.
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// query asks the resolver over UDP, retrying a timed-out attempt, and over TCP when the UDP
// answer is truncated.
func (r *Resolver) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(1232, false)

	var lastErr error
	for range r.cfg.Retries + 1 {
		resp, _, err := r.udp.ExchangeContext(ctx, m, r.cfg.Server)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if resp.Truncated {
			resp, _, err = r.tcp.ExchangeContext(ctx, m, r.cfg.Server)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrTemporary, name, err)
			}
		}
		return resp, nil
	}
	return nil, fmt.Errorf("%w: %s: %v", ErrTemporary, name, lastErr)
}
