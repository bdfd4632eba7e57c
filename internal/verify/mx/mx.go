// Package mx is layer 3 of the verification pipeline: it looks up a domain's MX hosts, in
// preference order, and their addresses, against one configured resolver (docs/architecture.md, "The verification pipeline").
//
// A domain without MX records but with an A or AAAA record receives mail at that address (RFC
// 5321 §5.1, the implicit MX): the look-up then returns the domain itself as its one host, with
// Implicit set. A null MX (RFC 7505, "MX 0 .") says the domain takes no mail, whatever its A
// records: ErrNullMX.
//
// Answers are cached — positive ones (implicit MX included) for 6 hours, "this domain takes no
// mail" for 15 minutes — and concurrent look-ups of one domain share a single query. Temporary
// failures (SERVFAIL, REFUSED, a timeout) are never cached and are reported as ErrTemporary, so
// that the pipeline answers "unknown" rather than calling a real domain invalid because a
// resolver hiccupped. A whole look-up — MX, the hosts' addresses, the implicit MX's — is bounded
// by Config.Budget (500ms), so a resolver that never answers costs at most that.
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

// MaxHosts bounds the MX hosts a look-up keeps, the most preferred first, and MaxAddrs the
// addresses it keeps of each host (of the implicit MX too). Real domains have a handful of each,
// and the prober could not try more within its budget; a domain whose DNS answers with thousands
// (as many as a TCP answer holds) would otherwise cost two address queries per host at our
// resolver on every look-up, and the cache, the fleet's MX_CACHE bucket and the prober as many
// entries (docs/architecture.md, "3. MX").
const (
	MaxHosts = 10
	MaxAddrs = 10
)

// ErrNoMX means the domain accepts no mail: NXDOMAIN, neither MX nor A/AAAA records, or a null
// MX (RFC 7505). An A or AAAA record alone is an implicit MX (RFC 5321 §5.1) and not ErrNoMX.
var ErrNoMX = errors.New("no MX records")

// ErrNullMX means the domain publishes a null MX (RFC 7505): it explicitly takes no mail. Errors
// that wrap it also wrap ErrNoMX.
var ErrNullMX = fmt.Errorf("%w: null MX", ErrNoMX)

// ErrNoMXAddress means the domain's MX records name hosts that have no address (they do not
// exist, or have neither A nor AAAA records), as the DNS said for certain: there is nothing to
// deliver to, which RFC 5321 §5.1 says must be reported as an error, and mail to the domain
// bounces. It wraps ErrNoMX. A host whose look-up failed (SERVFAIL, a timeout) is not this.
var ErrNoMXAddress = fmt.Errorf("%w: the MX hosts have no address", ErrNoMX)

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
	// Implicit is set when the domain has no MX records and its own A/AAAA records stand in
	// for them (RFC 5321 §5.1): Hosts is then the domain itself.
	Implicit bool
	// incomplete is set when a host's address look-up failed with a DNS error: the answer is
	// used, not cached.
	incomplete bool
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
	Server string // resolver host:port
	// Budget bounds a whole look-up: the MX query with its retry, the MX hosts' addresses and
	// the implicit MX's. 0 means 500ms, well inside the SMTP probe's 1,500ms.
	Budget time.Duration
	// Timeout bounds one query attempt; 0 means half the budget, so that one retry after a
	// timeout still fits in it.
	Timeout time.Duration
	Retries int // extra UDP attempts after a timeout; 0 means 1
	// MaxEntries bounds the cache; 0 means 100,000 domains.
	MaxEntries int
	// Shared, when set, is the verifier fleet's cache (docs/fleet.md): a domain one worker has
	// looked up is not looked up again by the others while the answer lasts (shared.go).
	Shared Shared
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
	if cfg.Budget <= 0 {
		cfg.Budget = 500 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Budget / 2
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
	// the answer. It is bounded by the resolver's own budget instead.
	ch := r.sf.DoChan(domain, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Budget)
		defer cancel()
		if res, err, ok := r.loadShared(lctx, domain); ok {
			return res, err
		}
		res, err := r.lookup(lctx, domain)
		if exp, ok := r.store(domain, res, err); ok {
			r.share(domain, res, err, exp)
		}
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

// store caches a look-up's answer for its lifetime and reports until when; temporary failures
// are not cached.
func (r *Resolver) store(domain string, res Result, err error) (time.Time, bool) {
	var ttl time.Duration
	switch {
	case err == nil && res.incomplete:
		return time.Time{}, false // a host's addresses are missing for a DNS error: asked again next time
	case err == nil:
		ttl = PositiveTTL
	case errors.Is(err, ErrNoMX):
		ttl = NegativeTTL
	default:
		return time.Time{}, false // temporary failures are asked again next time
	}
	exp := r.now().Add(ttl)
	r.storeUntil(domain, res, err, exp)
	return exp, true
}

// storeUntil caches an answer until exp.
func (r *Resolver) storeUntil(domain string, res Result, err error, exp time.Time) {
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
	r.cache[domain] = entry{res: res, err: err, expires: exp}
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

	var (
		hosts  []Host
		nullMX bool
	)
	for _, rr := range resp.Answer {
		mx, ok := rr.(*dns.MX)
		if !ok {
			continue // a CNAME on the way, for instance
		}
		name := strings.ToLower(strings.TrimSuffix(mx.Mx, "."))
		if name == "" {
			nullMX = true // a null MX (RFC 7505) names no host
			continue
		}
		hosts = append(hosts, Host{Name: name, Pref: mx.Preference})
	}
	if nullMX && len(hosts) == 0 {
		return Result{}, fmt.Errorf("%w: %s", ErrNullMX, domain)
	}
	if len(hosts) == 0 {
		return r.implicit(ctx, domain)
	}
	slices.SortStableFunc(hosts, func(a, b Host) int { return int(a.Pref) - int(b.Pref) })
	hosts = hosts[:min(len(hosts), MaxHosts)]

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
	var (
		wg     sync.WaitGroup
		failMu sync.Mutex
		failed error // a host's address look-up that failed temporarily
	)
	for i := range hosts {
		if g := glue[hosts[i].Name]; len(g) > 0 {
			hosts[i].Addrs = firstAddrs(g)
			continue
		}
		wg.Add(1)
		go func(h *Host) {
			defer wg.Done()
			var err error
			h.Addrs, err = r.resolve(ctx, h.Name)
			if err != nil && len(h.Addrs) == 0 {
				failMu.Lock()
				failed = err
				failMu.Unlock()
			}
		}(&hosts[i])
	}
	wg.Wait()
	if failed != nil {
		if !slices.ContainsFunc(hosts, func(h Host) bool { return len(h.Addrs) > 0 }) {
			// No host has an address because the look-ups failed, not because there are none:
			// a DNS error, answered as such and not cached (the MX answer would be kept 6 hours
			// with hosts the prober could never dial).
			return Result{}, fmt.Errorf("%w: %s: MX hosts' addresses: %v", ErrTemporary, domain, failed)
		}
		// Some hosts have addresses: the prober can use them now, but the answer is not kept.
		return Result{Hosts: hosts, incomplete: true}, nil
	}
	if !slices.ContainsFunc(hosts, func(h Host) bool { return len(h.Addrs) > 0 }) {
		// Every host answered, and none has an address: as negative an answer as no MX at
		// all, and cached as long (it is as likely to be fixed soon).
		names := make([]string, len(hosts))
		for i, h := range hosts {
			names[i] = h.Name
		}
		return Result{}, fmt.Errorf("%w: %s: %s", ErrNoMXAddress, domain, strings.Join(names, ", "))
	}
	return Result{Hosts: hosts}, nil
}

// implicit looks for the implicit MX of a domain that has no MX records (RFC 5321 §5.1): its own
// A and AAAA records. Neither means no mail; a failure of both queries is temporary.
func (r *Resolver) implicit(ctx context.Context, domain string) (Result, error) {
	addrs, err := r.resolve(ctx, domain)
	if len(addrs) > 0 {
		return Result{Hosts: []Host{{Name: domain, Addrs: addrs}}, Implicit: true}, nil
	}
	if err != nil {
		return Result{}, err
	}
	return Result{}, fmt.Errorf("%w: %s: neither MX nor A/AAAA records", ErrNoMX, domain)
}

// resolve asks for host's A and AAAA records at once. A host that is an alias (a CNAME, which
// MX targets should not be but often are) is followed by the recursive resolver, which answers
// with the CNAME chain and then the canonical name's addresses: every address record of the
// answer counts (the lowest MaxAddrs are kept), and the host keeps its MX name (mx_test.go,
// TestCNAMEdMXHost). Our client follows no CNAME itself, so a loop costs nothing here: the
// resolver gives up on it, or answers a chain with no address. err wraps ErrTemporary when no answer
// came and neither query could be answered (both failed, or one failed and the other was empty).
func (r *Resolver) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	var (
		mu      sync.Mutex
		out     []netip.Addr
		wg      sync.WaitGroup
		lastErr error
	)
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.query(ctx, host, t)
			if err == nil && resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
				err = fmt.Errorf("%w: %s: %s", ErrTemporary, host, dns.RcodeToString[resp.Rcode])
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr = err
				return
			}
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
	return firstAddrs(out), lastErr
}

// firstAddrs is the first MaxAddrs of addrs, in an array of their own so that the cache does not
// keep the rest.
func firstAddrs(addrs []netip.Addr) []netip.Addr {
	if len(addrs) <= MaxAddrs {
		return addrs
	}
	return slices.Clone(addrs[:MaxAddrs])
}

// query asks the resolver over UDP, retrying a timed-out attempt once (Retries) while ctx — the
// look-up's budget — has time left, and over TCP when the UDP answer is truncated. A SERVFAIL or
// REFUSED answer is returned as it is, not retried: a recursive resolver that just gave up on a
// name gives up again.
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
