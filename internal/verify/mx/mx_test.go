package mx

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/miekg/dns"
)

func startWorld(t *testing.T) *mailsim.World {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func addServer(t *testing.T, w *mailsim.World, name string) *mailsim.Server {
	t.Helper()
	s, err := w.AddServer(mailsim.ServerOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLookup(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	mx1 := addServer(t, w, "mx1.lookup.test")
	mx2 := addServer(t, w, "mx2.lookup.test")
	mx := []mailsim.MX{{Pref: 20, Host: "mx2.lookup.test"}, {Pref: 10, Host: "mx1.lookup.test"}}
	w.AddDomain("glue.test", mailsim.Domain{MX: mx})
	w.AddDomain("noglue.test", mailsim.Domain{MX: mx, NoGlue: true})
	w.AddDomain("trunc.test", mailsim.Domain{MX: mx, UDPTrunc: true})
	w.AddDomain("nullmx.test", mailsim.Domain{NullMX: true})
	w.AddDomain("onlya.test", mailsim.Domain{A: []string{"127.0.0.9"}})
	w.AddDomain("nullmxa.test", mailsim.Domain{NullMX: true, A: []string{"127.0.0.9"}})
	w.AddDomain("empty.test", mailsim.Domain{})
	w.AddDomain("servfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	w.AddDomain("refused.test", mailsim.Domain{Rcode: dns.RcodeRefused})
	w.AddDomain("timeout.test", mailsim.Domain{Drop: true})

	want := []Host{
		{Name: "mx1.lookup.test", Pref: 10, Addrs: []netip.Addr{mx1.Addr()}},
		{Name: "mx2.lookup.test", Pref: 20, Addrs: []netip.Addr{mx2.Addr()}},
	}
	r := New(Config{Server: w.DNSAddr(), Timeout: 100 * time.Millisecond})
	implicit := []Host{{Name: "onlya.test", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.9")}}}
	for _, tc := range []struct {
		domain  string
		want    []Host
		wantErr error
	}{
		{"glue.test", want, nil},
		{"noglue.test", want, nil},
		{"trunc.test", want, nil},
		{"nullmx.test", nil, ErrNullMX},
		{"nullmxa.test", nil, ErrNullMX}, // a null MX wins over the A record
		{"onlya.test", implicit, nil},    // RFC 5321 §5.1 implicit MX
		{"empty.test", nil, ErrNoMX},     // neither MX nor A/AAAA
		{"nxdomain.test", nil, ErrNoMX},
		{"servfail.test", nil, ErrTemporary},
		{"refused.test", nil, ErrTemporary},
		{"timeout.test", nil, ErrTemporary},
	} {
		t.Run(tc.domain, func(t *testing.T) {
			t.Parallel()
			res, err := r.Lookup(context.Background(), tc.domain)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, ErrNullMX) && !errors.Is(err, ErrNoMX) {
				t.Fatalf("a null MX must also be ErrNoMX: %v", err)
			}
			if res.Implicit != (tc.domain == "onlya.test") {
				t.Fatalf("Implicit = %v", res.Implicit)
			}
			if !slices.EqualFunc(res.Hosts, tc.want, func(a, b Host) bool {
				return a.Name == b.Name && a.Pref == b.Pref && slices.Equal(a.Addrs, b.Addrs)
			}) {
				t.Fatalf("hosts = %+v, want %+v", res.Hosts, tc.want)
			}
		})
	}
	t.Run("truncation retried over TCP", func(t *testing.T) {
		t.Parallel()
		if _, err := New(Config{Server: w.DNSAddr()}).Lookup(context.Background(), "trunc.test"); err != nil {
			t.Fatal(err)
		}
		if w.DNSStats().TCP == 0 {
			t.Fatal("no TCP query after a truncated UDP answer")
		}
	})
}

// TestFailureBudget shows that a look-up the resolver cannot answer — SERVFAIL, REFUSED, or no
// answer at all — ends as ErrTemporary within the default budget (500ms, one retry after a
// timed-out attempt), far inside the SMTP probe's 1,500ms, and that a SERVFAIL is not retried.
// TestCNAMEdMXHost shows that an MX host which is an alias (a CNAME, not RFC 5321-conforming but
// common) is looked up through its alias: the host keeps the MX record's name and gets the
// canonical name's addresses, which the resolver sends after the CNAME record.
func TestCNAMEdMXHost(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	mail := addServer(t, w, "mail.provider.test")
	w.AddCNAME("mx.alias.test", "mail.provider.test")
	w.AddCNAME("mx2.alias.test", "mx.alias.test") // a chain of two
	w.AddCNAME("dangling.alias.test", "gone.provider.test")
	w.AddDomain("alias.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.alias.test"}}})
	w.AddDomain("chain.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx2.alias.test"}}})
	w.AddDomain("dangling.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "dangling.alias.test"}, {Pref: 20, Host: "mx.alias.test"}}})

	r := New(Config{Server: w.DNSAddr()})
	addrs := []netip.Addr{mail.Addr()}
	for _, tc := range []struct {
		domain string
		want   []Host
	}{
		{"alias.test", []Host{{Name: "mx.alias.test", Pref: 10, Addrs: addrs}}},
		{"chain.test", []Host{{Name: "mx2.alias.test", Pref: 10, Addrs: addrs}}},
		// An alias to a name that does not exist leaves its host without addresses; the next
		// host still works.
		{"dangling.test", []Host{{Name: "dangling.alias.test", Pref: 10}, {Name: "mx.alias.test", Pref: 20, Addrs: addrs}}},
	} {
		t.Run(tc.domain, func(t *testing.T) {
			t.Parallel()
			res, err := r.Lookup(context.Background(), tc.domain)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(res.Hosts, tc.want, func(a, b Host) bool {
				return a.Name == b.Name && a.Pref == b.Pref && slices.Equal(a.Addrs, b.Addrs)
			}) {
				t.Fatalf("hosts = %+v, want %+v", res.Hosts, tc.want)
			}
		})
	}
}

func TestFailureBudget(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	w.AddDomain("servfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	w.AddDomain("refused.test", mailsim.Domain{Rcode: dns.RcodeRefused})
	w.AddDomain("silent.test", mailsim.Domain{Drop: true})
	w.AddDomain("slowfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure, Delay: 2 * time.Second})
	r := New(Config{Server: w.DNSAddr()}) // the production defaults
	t.Run("group", func(t *testing.T) { failureBudget(t, r) })
	if q := w.DNSQueries("servfail.test", dns.TypeMX); q != 1 {
		t.Errorf("SERVFAIL asked %d times, want 1 (not retried)", q)
	}
	if q := w.DNSQueries("silent.test", dns.TypeMX); q != 2 {
		t.Errorf("a silent resolver asked %d times, want 2 (one retry)", q)
	}
}

func failureBudget(t *testing.T, r *Resolver) {
	for _, tc := range []struct {
		domain string
		max    time.Duration
	}{
		{"servfail.test", 200 * time.Millisecond},
		{"refused.test", 200 * time.Millisecond},
		{"silent.test", 800 * time.Millisecond},   // 500ms budget, with margin for -race
		{"slowfail.test", 800 * time.Millisecond}, // a resolver that takes 2s to give up
	} {
		t.Run(tc.domain, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := r.Lookup(context.Background(), tc.domain)
			took := time.Since(start)
			if !errors.Is(err, ErrTemporary) {
				t.Fatalf("err = %v, want ErrTemporary", err)
			}
			if took > tc.max {
				t.Fatalf("took %v, want at most %v", took, tc.max)
			}
			t.Logf("%s: %v in %v", tc.domain, err, took)
		})
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	addServer(t, w, "mx.cache.test")
	w.AddDomain("cache.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.cache.test"}}})
	w.AddDomain("flaky.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	w.AddDomain("implicit.test", mailsim.Domain{A: []string{"127.0.0.9"}})
	// MX records whose host does not exist: nothing to deliver to (ErrNoMXAddress), kept like a
	// negative answer.
	w.AddDomain("nowhere.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.gone.test"}}})

	r := New(Config{Server: w.DNSAddr()})
	now := time.Now()
	r.now = func() time.Time { return now }
	ctx := context.Background()
	queries := func(d string) int64 { return w.DNSQueries(d, dns.TypeMX) }

	for range 3 {
		if _, err := r.Lookup(ctx, "cache.test"); err != nil {
			t.Fatal(err)
		}
		r.Lookup(ctx, "missing.test")
		r.Lookup(ctx, "flaky.test")
		if res, err := r.Lookup(ctx, "implicit.test"); err != nil || !res.Implicit {
			t.Fatalf("implicit.test: %+v, %v", res, err)
		}
		if res, err := r.Lookup(ctx, "nowhere.test"); !errors.Is(err, ErrNoMXAddress) || !errors.Is(err, ErrNoMX) {
			t.Fatalf("nowhere.test: %+v, %v; want ErrNoMXAddress, which is an ErrNoMX", res, err)
		}
	}
	if q := queries("nowhere.test"); q != 1 {
		t.Errorf("MX hosts without addresses asked %d times, want 1 (cached)", q)
	}
	if q := queries("cache.test"); q != 1 {
		t.Errorf("positive answer asked %d times, want 1 (cached)", q)
	}
	if q := queries("missing.test"); q != 1 {
		t.Errorf("NXDOMAIN asked %d times, want 1 (cached)", q)
	}
	if q := queries("flaky.test"); q != 3 {
		t.Errorf("SERVFAIL asked %d times, want 3 (never cached)", q)
	}
	if q := queries("implicit.test"); q != 1 {
		t.Errorf("implicit MX asked %d times, want 1 (cached)", q)
	}

	now = now.Add(NegativeTTL + time.Second)
	r.Lookup(ctx, "cache.test")
	r.Lookup(ctx, "missing.test")
	if q := queries("cache.test"); q != 1 {
		t.Errorf("positive answer asked again after 15 min: %d queries", q)
	}
	if q := queries("missing.test"); q != 2 {
		t.Errorf("negative answer not asked again after 15 min: %d queries", q)
	}
	r.Lookup(ctx, "implicit.test")
	if q := queries("implicit.test"); q != 1 {
		t.Errorf("implicit MX asked again after 15 min: %d queries (it is a positive answer)", q)
	}
	r.Lookup(ctx, "nowhere.test")
	if q := queries("nowhere.test"); q != 2 {
		t.Errorf("MX hosts without addresses not asked again after 15 min: %d queries (kept 6 h, as if dialable)", q)
	}
	now = now.Add(PositiveTTL)
	r.Lookup(ctx, "cache.test")
	r.Lookup(ctx, "implicit.test")
	if q := queries("cache.test"); q != 2 {
		t.Errorf("positive answer not asked again after 6 h: %d queries", q)
	}
	if q := queries("implicit.test"); q != 2 {
		t.Errorf("implicit MX not asked again after 6 h: %d queries", q)
	}
}

func TestSingleflight(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	addServer(t, w, "mx.sf.test")
	w.AddDomain("sf.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.sf.test"}}, Delay: 100 * time.Millisecond})

	r := New(Config{Server: w.DNSAddr()})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if res, err := r.Lookup(context.Background(), "sf.test"); err != nil || res.Primary() != "mx.sf.test" {
				t.Errorf("Lookup = %+v, %v", res, err)
			}
		})
	}
	wg.Wait()
	if q := w.DNSQueries("sf.test", dns.TypeMX); q != 1 {
		t.Fatalf("50 concurrent look-ups sent %d queries, want 1", q)
	}
}

// An MX host whose address look-up fails with a DNS error is not "a host without addresses":
// when no host has an address for that reason the look-up is a temporary failure, and when only
// some have, the answer is used but not cached (it was kept for 6 hours, and shared with the
// fleet, with a host the prober could never dial).
func TestMXHostLookupFailure(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	ok := addServer(t, w, "mx2.half.test")
	w.AddDomain("hostfail.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.hostfail.test"}}, NoGlue: true})
	w.AddDomain("mx.hostfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	w.AddDomain("half.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx1.half.test"}, {Pref: 20, Host: "mx2.half.test"}}, NoGlue: true})
	w.AddDomain("mx1.half.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})

	r := New(Config{Server: w.DNSAddr()})
	ctx := context.Background()
	for range 2 {
		if res, err := r.Lookup(ctx, "hostfail.test"); !errors.Is(err, ErrTemporary) {
			t.Fatalf("hostfail.test: %+v, %v; want a temporary failure", res, err)
		}
		res, err := r.Lookup(ctx, "half.test")
		if err != nil || len(res.Hosts) != 2 || len(res.Hosts[0].Addrs) != 0 || !slices.Equal(res.Hosts[1].Addrs, []netip.Addr{ok.Addr()}) {
			t.Fatalf("half.test: %+v, %v; want both hosts, the second with its address", res, err)
		}
	}
	for _, d := range []string{"hostfail.test", "half.test"} {
		if q := w.DNSQueries(d, dns.TypeMX); q != 2 {
			t.Errorf("%s asked %d times in two look-ups, want 2 (not cached)", d, q)
		}
	}
}
