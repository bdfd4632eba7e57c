package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

var sampleBody = []byte(`{"email":"a@example.com","valid":true,"status":"deliverable","confidence":0.95,` +
	`"job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11"}`)

// A signed delivery arrives once, byte for byte, with the headers of docs/api.md, "The callback request".
func TestDeliverySuccess(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"whsec_12345678", ""} {
		t.Run("secret="+secret, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, statuses(200))
			b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
			id := b.create(t, b.accountID, rc.url("/cb"), secret, sampleBody, true)
			r := b.waitFinal(t, id, 15*time.Second)
			if r.state != StateDelivered || r.attempts != 1 || itoa(r.lastStatus) != "200" {
				t.Fatalf("delivery = %+v, want delivered after 1 attempt with 200", r)
			}
			hits := rc.snapshot()
			if len(hits) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(hits))
			}
			h := hits[0]
			if !bytes.Equal(h.body, sampleBody) {
				t.Errorf("body = %q, want the stored bytes %q", h.body, sampleBody)
			}
			if ct := h.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			sig := h.header.Get("x-service-signature")
			if secret == "" {
				if _, ok := h.header["X-Service-Signature"]; ok {
					t.Errorf("unsigned delivery carries a signature header %q", sig)
				}
			} else if err := Verify([]byte(secret), h.body, sig); err != nil {
				t.Errorf("receiver-side Verify: %v (header %q)", err, sig)
			}
			if got := h.header.Get("X-Mailvet-Delivery"); got != id.String() {
				t.Errorf("X-Mailvet-Delivery = %q, want %s", got, id)
			}
			as := b.attempts(t, id)
			if len(as) != 1 || itoa(as[0].status) != "200" || as[0].err != nil {
				t.Errorf("attempt log = %+v", as)
			}
		})
	}
}

// The retry rules (docs/api.md, "Retries"), against a real HTTPS receiver.
func TestDeliveryRetries(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", MaxStoredResponse) // 2 bytes each: the cut splits a character
	tests := []struct {
		name      string
		script    func(int, http.ResponseWriter, *http.Request)
		state     string
		attempts  int
		statuses  string // of the attempt log, in order
		checkBody func(t *testing.T, body *string)
	}{
		{name: "5xx then success", script: statuses(503, 200), state: StateDelivered, attempts: 2, statuses: "503,200"},
		{name: "4xx is final", script: statuses(404, 200), state: StateFailed, attempts: 1, statuses: "404"},
		{name: "410 Gone is final", script: statuses(410, 200), state: StateFailed, attempts: 1, statuses: "410"},
		{name: "429 is retried", script: statuses(429, 200), state: StateDelivered, attempts: 2, statuses: "429,200"},
		{name: "3xx is final and not followed", script: func(n int, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/moved" {
				w.WriteHeader(200) // reaching this would mean the redirect was followed
				return
			}
			w.Header().Set("Location", "/moved")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}, state: StateFailed, attempts: 1, statuses: "307"},
		{name: "response body truncated", script: func(n int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			_, _ = w.Write([]byte("x" + big))
		}, state: StateFailed, attempts: 1, statuses: "400", checkBody: func(t *testing.T, body *string) {
			if body == nil || len(*body) > MaxStoredResponse+3 || !strings.HasPrefix(*body, "xéé") {
				t.Errorf("stored response body of %d bytes, want at most %d (+ one replacement)", len(*body), MaxStoredResponse)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, tt.script)
			b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
			id := b.create(t, b.accountID, rc.url("/cb"), "whsec_12345678", sampleBody, true)
			r := b.waitFinal(t, id, 20*time.Second)
			as := b.attempts(t, id)
			var got []string
			for _, a := range as {
				got = append(got, itoa(a.status))
			}
			if r.state != tt.state || r.attempts != tt.attempts || strings.Join(got, ",") != tt.statuses {
				t.Fatalf("delivery %s after %d attempts (log %v), want %s after %d (%s)", r.state, r.attempts, got, tt.state, tt.attempts, tt.statuses)
			}
			if n := int(rc.count.Load()); n != tt.attempts {
				t.Errorf("receiver got %d requests, want %d", n, tt.attempts)
			}
			if tt.checkBody != nil {
				tt.checkBody(t, as[len(as)-1].body)
			}
		})
	}
}

// Three 5xx answers use up the attempts, and the gaps between them are those of the retry schedule:
// 1.0–1.6 s and 2.0–2.6 s. The gaps are measured at the receiver, so they include the redelivery
// and the request's own transit (the worker subtracts its own bookkeeping from the delay). That
// overhead is about 5 ms on loopback; 100 ms of slack above the spec's bound absorbs a loaded
// test machine running with -race. The lower bounds are exact.
func TestRetryGaps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(500))
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	r := b.waitFinal(t, id, 20*time.Second)
	if r.state != StateFailed || r.attempts != 3 {
		t.Fatalf("delivery %s after %d attempts, want failed after 3", r.state, r.attempts)
	}
	// The final failure acknowledges the delivery's message: once the stream is empty, nothing is
	// left that could bring a fourth attempt.
	stream, err := b.js.Stream(context.Background(), queue.StreamWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "the delivery's message to be acknowledged", func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	})
	hits := rc.snapshot()
	if len(hits) != 3 {
		t.Fatalf("receiver got %d requests, want exactly 3", len(hits))
	}
	const slack = 100 * time.Millisecond
	bounds := [][2]time.Duration{{1000 * time.Millisecond, 1600 * time.Millisecond}, {2000 * time.Millisecond, 2600 * time.Millisecond}}
	for i, bd := range bounds {
		gap := hits[i+1].at.Sub(hits[i].at)
		t.Logf("gap before attempt %d: %s", i+2, gap)
		if gap < bd[0] || gap > bd[1]+slack {
			t.Errorf("gap before attempt %d = %s, want %s–%s", i+2, gap, bd[0], bd[1])
		}
	}
}

// Connection refused and a TLS failure are transport errors: retried while attempts remain.
func TestTransportErrorsRetried(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close() // nothing listens there any more
		b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
		id := b.create(t, b.accountID, "https://"+testHost+":"+port+"/cb", "", sampleBody, true)
		r := b.waitFinal(t, id, 20*time.Second)
		as := b.attempts(t, id)
		if r.state != StateFailed || len(as) != 3 {
			t.Fatalf("delivery %s with %d attempts, want failed after 3", r.state, len(as))
		}
		for _, a := range as {
			if a.status != nil || a.err == nil || !strings.Contains(*a.err, "refused") {
				t.Errorf("attempt %d: status %s, error %v; want a connection-refused error", a.n, itoa(a.status), deref(a.err))
			}
		}
	})
	t.Run("TLS failure then success", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, statuses(200))
		// The first handshake presents a certificate from a CA the client does not trust.
		untrusted := tlstest.New(t, testHost).Leaf
		var handshakes atomic.Int64
		rc.srv.TLS.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if handshakes.Add(1) == 1 {
				return &untrusted, nil
			}
			c := getCA(t).Leaf
			return &c, nil
		}
		rc.srv.TLS.Certificates = nil
		b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
		id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
		r := b.waitFinal(t, id, 20*time.Second)
		as := b.attempts(t, id)
		if r.state != StateDelivered || len(as) != 2 {
			t.Fatalf("delivery %s with %d attempts, want delivered after 2", r.state, len(as))
		}
		if as[0].err == nil || !strings.Contains(*as[0].err, "certificate") {
			t.Errorf("attempt 1 error = %v, want a certificate error", deref(as[0].err))
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// With AllowPrivate off, the address is checked at dial time, after resolution, for every
// address: a name resolving to loopback is refused, also when the resolver rebinds between a
// pre-check and the dial, and also when the loopback address hides in an IPv4-mapped IPv6 one.
// The receiver must never see a request.
func TestSSRFRefusedAtDial(t *testing.T) {
	t.Parallel()
	public := net.IPv4(93, 184, 216, 34).To4()
	loop := net.IPv4(127, 0, 0, 1).To4()
	tests := []struct {
		name     string
		answer   func(qtype uint16, n int) []net.IP
		precheck bool // resolve once before delivering, as a naive pre-dial check would
	}{
		{name: "name resolves to loopback", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeA {
				return []net.IP{loop}
			}
			return nil
		}},
		{name: "rebinding: public first, loopback second", precheck: true, answer: func(q uint16, n int) []net.IP {
			if q != dns.TypeA {
				return nil
			}
			if n == 1 {
				return []net.IP{public}
			}
			return []net.IP{loop}
		}},
		{name: "IPv4-mapped IPv6 loopback", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeAAAA {
				return []net.IP{net.ParseIP("::ffff:127.0.0.1")}
			}
			return nil
		}},
		// IPv6 documentation (3fff::/20 besides 2001:db8::/32) and benchmarking (2001:2::/48)
		// space: nothing public listens there, so whatever answers is someone's own network.
		{name: "IPv6 documentation range 3fff::/20", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeAAAA {
				return []net.IP{net.ParseIP("3fff:123::1")}
			}
			return nil
		}},
		{name: "IPv6 benchmarking range", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeAAAA {
				return []net.IP{net.ParseIP("2001:2::1")}
			}
			return nil
		}},
		{name: "IPv6 reserved space outside 2000::/3", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeAAAA {
				return []net.IP{net.ParseIP("4000::1")}
			}
			return nil
		}},
		{name: "metadata address", answer: func(q uint16, _ int) []net.IP {
			if q == dns.TypeA {
				return []net.IP{net.IPv4(169, 254, 169, 254).To4()}
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, statuses(200))
			resolverAddr := dnsServer(t, tt.answer)
			if tt.precheck {
				r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, resolverAddr)
				}}
				ips, err := r.LookupIP(context.Background(), "ip4", testHost)
				if err != nil || len(ips) != 1 || !ips[0].Equal(public) {
					t.Fatalf("pre-check look-up = %v, %v; want the public address", ips, err)
				}
			}
			b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: false, DNSResolver: resolverAddr}})
			id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
			r := b.waitFinal(t, id, 15*time.Second)
			as := b.attempts(t, id)
			if r.state != StateFailed || len(as) != 1 {
				t.Fatalf("delivery %s with %d attempts, want failed after 1", r.state, len(as))
			}
			if as[0].err == nil || !strings.Contains(*as[0].err, "not a public unicast address") {
				t.Errorf("attempt error = %v, want the address refusal", deref(as[0].err))
			}
			if n := rc.count.Load(); n != 0 {
				t.Errorf("receiver got %d requests, want none", n)
			}
		})
	}
}
