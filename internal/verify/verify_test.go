package verify

import (
	"context"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/miekg/dns"
)

type testBundle struct {
	w *mailsim.World
	v *Verifier
}

// setup starts a mail world with the given round-trip time and a Verifier pointed at it.
func setup(t testing.TB, rtt time.Duration, maxPerHost int) *testBundle {
	t.Helper()
	w, err := mailsim.Start(mailsim.Options{RTT: rtt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	v := newVerifier(t, w, maxPerHost)
	t.Cleanup(v.Close)
	return &testBundle{w: w, v: v}
}

func (b *testBundle) server(t testing.TB, opts mailsim.ServerOptions) *mailsim.Server {
	t.Helper()
	s, err := b.w.AddServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mxOf(hosts ...string) []mailsim.MX {
	var out []mailsim.MX
	for i, h := range hosts {
		out = append(out, mailsim.MX{Pref: uint16(10 * (i + 1)), Host: h})
	}
	return out
}

// TestVerify covers every status and every row of the confidence table (result.go).
func TestVerify(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	b.server(t, mailsim.ServerOptions{Name: "mx.acme.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.tls.test", RequireTLS: true})
	b.server(t, mailsim.ServerOptions{Name: "mx.tarpit.test", Tarpit: true})
	b.server(t, mailsim.ServerOptions{Name: "mx.refused.test", Refuse: true})
	b.server(t, mailsim.ServerOptions{Name: "mx.google.test"})
	implicitMX := b.server(t, mailsim.ServerOptions{Name: "host.implicit.test"})

	b.w.AddDomain("acme.test", mailsim.Domain{MX: mxOf("mx.acme.test"), Users: []string{"ann", "info"}, Mailboxes: map[string]mailsim.Reply{
		"grey": mailsim.ReplyGreylisted, "policy": mailsim.ReplyPolicy,
	}})
	b.w.AddDomain("catchall.test", mailsim.Domain{MX: mxOf("mx.acme.test"), CatchAll: true})
	b.w.AddDomain("tls.test", mailsim.Domain{MX: mxOf("mx.tls.test"), Users: []string{"ann"}})
	b.w.AddDomain("tarpit.test", mailsim.Domain{MX: mxOf("mx.tarpit.test"), Users: []string{"ann"}})
	b.w.AddDomain("fallback.test", mailsim.Domain{MX: mxOf("mx.refused.test", "mx.acme.test"), Users: []string{"ann"}})
	b.w.AddDomain("nomx.test", mailsim.Domain{})
	b.w.AddDomain("implicit.test", mailsim.Domain{A: []string{implicitMX.Addr().String()}, Users: []string{"ann"}})
	b.w.AddDomain("nullmx.test", mailsim.Domain{NullMX: true, A: []string{implicitMX.Addr().String()}})
	b.w.AddDomain("servfail.test", mailsim.Domain{Rcode: dns.RcodeServerFailure})
	b.w.AddDomain("refused.test", mailsim.Domain{Rcode: dns.RcodeRefused})
	b.w.AddDomain("silent.test", mailsim.Domain{Drop: true})
	b.w.AddDomain("gmail.com", mailsim.Domain{MX: mxOf("mx.google.test"), CatchAll: true})

	type want struct {
		status     verdict.Status
		valid      bool
		confidence float64
		failed     verdict.Check // "" for null
		mxHost     string
		role       bool
		catchAll   bool
		blocked    bool
		disposable bool
		reason     verdict.Reason
		maxTook    time.Duration // 0 means the 1500ms probe budget
	}
	for _, tc := range []struct {
		name, addr string
		want       want
	}{
		{"deliverable", "ann@acme.test", want{status: verdict.StatusDeliverable, valid: true, confidence: 0.95, mxHost: "mx.acme.test", reason: verdict.ReasonAccepted}},
		{"deliverable role", "info@acme.test", want{status: verdict.StatusDeliverable, valid: true, confidence: 0.90, mxHost: "mx.acme.test", role: true, reason: verdict.ReasonAccepted}},
		{"undeliverable 5.1.1", "bob@acme.test", want{status: verdict.StatusUndeliverable, confidence: 0.02, failed: verdict.CheckSMTP, mxHost: "mx.acme.test", reason: verdict.ReasonMailboxUnknown}},
		{"catch-all", "whoever@catchall.test", want{status: verdict.StatusCatchAll, confidence: 0.60, mxHost: "mx.acme.test", catchAll: true, reason: verdict.ReasonCatchAll}},
		{"greylisted 450", "grey@acme.test", want{status: verdict.StatusUnknown, confidence: 0.50, mxHost: "mx.acme.test", reason: verdict.ReasonGreylisted}},
		{"policy 554 5.7.1", "policy@acme.test", want{status: verdict.StatusUnknown, confidence: 0.50, mxHost: "mx.acme.test", reason: verdict.ReasonPolicyBlocked}},
		{"STARTTLS required", "ann@tls.test", want{status: verdict.StatusDeliverable, valid: true, confidence: 0.95, mxHost: "mx.tls.test", reason: verdict.ReasonAccepted}},
		{"tarpit", "ann@tarpit.test", want{status: verdict.StatusUnknown, confidence: 0.50, mxHost: "mx.tarpit.test", reason: verdict.ReasonTimeout}},
		{"refused first MX, second answers", "ann@fallback.test", want{status: verdict.StatusDeliverable, valid: true, confidence: 0.95, mxHost: "mx.refused.test", reason: verdict.ReasonAccepted}},
		{"implicit MX (an A record, RFC 5321 5.1)", "ann@implicit.test", want{status: verdict.StatusDeliverable, valid: true, confidence: 0.95, mxHost: "implicit.test", reason: verdict.ReasonAccepted}},
		{"implicit MX, unknown mailbox", "bob@implicit.test", want{status: verdict.StatusUndeliverable, confidence: 0.02, failed: verdict.CheckSMTP, mxHost: "implicit.test", reason: verdict.ReasonMailboxUnknown}},
		{"neither MX nor A", "ann@nomx.test", want{status: verdict.StatusInvalid, confidence: 0, failed: verdict.CheckNoMX, reason: verdict.ReasonNoMX}},
		{"null MX (with an A record)", "ann@nullmx.test", want{status: verdict.StatusInvalid, confidence: 0, failed: verdict.CheckNoMX, reason: verdict.ReasonNullMX}},
		{"NXDOMAIN", "ann@nowhere.test", want{status: verdict.StatusInvalid, confidence: 0, failed: verdict.CheckNoMX, reason: verdict.ReasonNoMX}},
		// DNS failures are temporary: unknown, and fast — well inside the DNS budget (500ms),
		// with a generous margin for -race.
		{"SERVFAIL", "ann@servfail.test", want{status: verdict.StatusUnknown, confidence: 0.50, reason: verdict.ReasonDNSError, maxTook: 300 * time.Millisecond}},
		{"REFUSED", "ann@refused.test", want{status: verdict.StatusUnknown, confidence: 0.50, reason: verdict.ReasonDNSError, maxTook: 300 * time.Millisecond}},
		{"DNS never answers", "ann@silent.test", want{status: verdict.StatusUnknown, confidence: 0.50, reason: verdict.ReasonDNSError, maxTook: 900 * time.Millisecond}},
		{"smtp_blocked provider", "ann@gmail.com", want{status: verdict.StatusUnknown, confidence: 0.75, mxHost: "mx.google.test", blocked: true, reason: verdict.ReasonProviderBlocksProbes}},
		{"syntax", "ann..x@acme.test", want{status: verdict.StatusInvalid, confidence: 0, failed: verdict.CheckSyntax, reason: verdict.ReasonInvalidSyntax}},
		{"disposable", "ann@mailinator.com", want{status: verdict.StatusInvalid, confidence: 0, failed: verdict.CheckDisposable, disposable: true, reason: verdict.ReasonDisposable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := b.v.Verify(context.Background(), tc.addr)
			w := tc.want
			took := time.Since(start)
			if took > 1600*time.Millisecond {
				t.Errorf("took %v, over the 1500ms budget", took)
			}
			if w.maxTook > 0 {
				if took > w.maxTook {
					t.Errorf("took %v, want at most %v", took, w.maxTook)
				}
				t.Logf("%s answered %s/%s in %v", tc.addr, r.Status, r.Reason, took)
			}
			failed := verdict.Check("")
			if r.FailedCheck != nil {
				failed = *r.FailedCheck
			}
			mxHost := ""
			if r.MXHost != nil {
				mxHost = *r.MXHost
			}
			if r.Status != w.status || r.Valid != w.valid || r.Confidence != w.confidence || failed != w.failed ||
				mxHost != w.mxHost || r.MXFound != (w.mxHost != "") || r.Role != w.role || r.CatchAll != w.catchAll ||
				r.SMTPBlocked != w.blocked || r.Disposable != w.disposable || r.Reason != w.reason {
				t.Fatalf("Verify(%q) = %+v (failed_check %q, mx_host %q), want %+v", tc.addr, r, failed, mxHost, w)
			}
			if r.LatencyMS <= 0 {
				t.Errorf("latency_ms = %v", r.LatencyMS)
			}
		})
	}
}

func TestBlockedProviderNeverDialled(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	s := b.server(t, mailsim.ServerOptions{Name: "mx.google.test"})
	for _, d := range []string{"gmail.com", "yahoo.co.uk", "hotmail.com", "icloud.com"} {
		b.w.AddDomain(d, mailsim.Domain{MX: mxOf("mx.google.test"), CatchAll: true})
	}
	for _, a := range []string{"ann@gmail.com", "ann@yahoo.co.uk", "ann@hotmail.com", "ann@icloud.com"} {
		if r := b.v.Verify(context.Background(), a); !r.SMTPBlocked || r.Confidence != 0.75 {
			t.Errorf("%s: %+v", a, r)
		}
	}
	if st := s.Stats(); st.Sessions != 0 {
		t.Fatalf("blocked providers' MX saw %d sessions, want 0", st.Sessions)
	}
}

func TestSignalsOnFailedAddresses(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	// A typo of a well-known provider with no MX still gets its suggestion: the signals run for
	// every syntactically valid address, also one that fails a later check.
	r := b.v.Verify(context.Background(), "ann@gmial.con")
	if r.Status != verdict.StatusInvalid || r.Suggestion == nil {
		t.Fatalf("%+v", r)
	}
	r, final := b.v.Local("postmaster@mailinator.com")
	if !final || !r.Disposable || !r.Role {
		t.Fatalf("Local = %+v, %v", r, final)
	}
	if _, final := b.v.Local("ann@acme.test"); final {
		t.Fatal("a valid, non-disposable address is final after the local layers")
	}
}

func TestVerifyBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 5*time.Millisecond, 4)
	srv := b.server(t, mailsim.ServerOptions{Name: "mx.batch.test"})
	b.w.AddDomain("a.test", mailsim.Domain{MX: mxOf("mx.batch.test"), Users: []string{"ann"}})
	b.w.AddDomain("b.test", mailsim.Domain{MX: mxOf("mx.batch.test"), CatchAll: true})
	raws := []string{"ann@a.test", "bob@a.test", "x@b.test", "not an address", "ann@nowhere.test", "ann@a.test"}
	want := []verdict.Status{verdict.StatusDeliverable, verdict.StatusUndeliverable, verdict.StatusCatchAll, verdict.StatusInvalid, verdict.StatusInvalid, verdict.StatusDeliverable}
	var order []int
	res := b.v.VerifyBatch(context.Background(), raws, func(i int, r verdict.Result) { order = append(order, i) })
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("%s: %s, want %s", raws[i], r.Status, want[i])
		}
	}
	if len(order) != len(raws) {
		t.Errorf("each called %d times, want %d", len(order), len(raws))
	}
	if s := srv.Stats().Sessions; s != 1 {
		t.Errorf("%d sessions for one MX address, want 1", s)
	}
	if q := b.w.DNSQueries("a.test", dns.TypeMX); q != 1 {
		t.Errorf("a.test asked %d times, want 1", q)
	}
}

// TestCNAMEdMXHost: a domain whose MX host is an alias (CNAME) of the mail server is verified
// against that server, and mx_host stays the name the MX record gave.
func TestCNAMEdMXHost(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	srv := b.server(t, mailsim.ServerOptions{Name: "mail.provider.test"})
	b.w.AddCNAME("mx.alias.test", "mail.provider.test")
	b.w.AddDomain("alias.test", mailsim.Domain{MX: mxOf("mx.alias.test"), Users: []string{"ann"}})

	for _, tc := range []struct {
		addr   string
		status verdict.Status
	}{
		{"ann@alias.test", verdict.StatusDeliverable},
		{"bob@alias.test", verdict.StatusUndeliverable},
	} {
		r := b.v.Verify(context.Background(), tc.addr)
		if r.Status != tc.status || r.MXHost == nil || *r.MXHost != "mx.alias.test" {
			t.Errorf("Verify(%q) = %+v, want %s via mx.alias.test", tc.addr, r, tc.status)
		}
	}
	if s := srv.Stats().Sessions; s == 0 {
		t.Error("the CNAME's target server saw no session")
	}
}

// TestIDNDomain: an address at an internationalised domain is converted to A-labels (UTS-46) and
// verified against the mail route of the xn-- name, in Verify and in VerifyBatch alike; the
// result's email carries the ASCII domain.
func TestIDNDomain(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	srv := b.server(t, mailsim.ServerOptions{Name: "mx.xn--bcher-kva.example"})
	b.w.AddDomain("xn--bcher-kva.example", mailsim.Domain{MX: mxOf("mx.xn--bcher-kva.example"), Users: []string{"anna"}})

	raws := []string{"anna@bücher.example", "anna@BÜCHER.example", "anna@xn--bcher-kva.example", "otto@bücher.example"}
	want := []struct {
		email  string
		status verdict.Status
	}{
		{"anna@xn--bcher-kva.example", verdict.StatusDeliverable},
		{"anna@xn--bcher-kva.example", verdict.StatusDeliverable},
		{"anna@xn--bcher-kva.example", verdict.StatusDeliverable},
		{"otto@xn--bcher-kva.example", verdict.StatusUndeliverable},
	}
	check := func(how string, i int, r verdict.Result) {
		t.Helper()
		if r.Email != want[i].email || r.Status != want[i].status || r.MXHost == nil || *r.MXHost != "mx.xn--bcher-kva.example" {
			t.Errorf("%s(%q) = %+v, want %s %s", how, raws[i], r, want[i].email, want[i].status)
		}
	}
	for i, raw := range raws {
		check("Verify", i, b.v.Verify(context.Background(), raw))
	}
	for i, r := range b.v.VerifyBatch(context.Background(), raws, nil) {
		check("VerifyBatch", i, r)
	}
	if s := srv.Stats().Sessions; s == 0 {
		t.Error("the xn-- domain's server saw no session")
	}
	if q := b.w.DNSQueries("xn--bcher-kva.example", dns.TypeMX); q != 1 {
		t.Errorf("xn--bcher-kva.example asked %d times, want 1 (one cached look-up for every spelling)", q)
	}
}

// A refused MAIL FROM is the sender's problem only when it is permanent: a 4xx to it is
// temporary and says which (greylisted, so that an async job is probed again; a busy server),
// a 421 is retried in another session; repeated 421s to RCPT are a busy server, not a refused
// connection.
func TestTemporaryRefusalsOfTheSender(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	for _, c := range []struct {
		name string
		opts mailsim.ServerOptions
		dom  mailsim.Domain
		want verdict.Reason
	}{
		{"m554", mailsim.ServerOptions{MailReply: &mailsim.Reply{Code: 554, Enhanced: "5.7.1", Text: "Sender rejected"}}, mailsim.Domain{}, verdict.ReasonSenderRejected},
		{"m451", mailsim.ServerOptions{MailReply: &mailsim.Reply{Code: 451, Enhanced: "4.7.1", Text: "Greylisted, please try again later"}}, mailsim.Domain{}, verdict.ReasonGreylisted},
		{"m450", mailsim.ServerOptions{MailReply: &mailsim.Reply{Code: 450, Enhanced: "4.3.2", Text: "System busy"}}, mailsim.Domain{}, verdict.ReasonTemporarilyUnavail},
		{"m421", mailsim.ServerOptions{MailReply: &mailsim.Reply{Code: 421, Enhanced: "4.3.2", Text: "Service shutting down"}}, mailsim.Domain{}, verdict.ReasonTemporarilyUnavail},
		{"r421", mailsim.ServerOptions{}, mailsim.Domain{All: &mailsim.Reply{Code: 421, Enhanced: "4.7.0", Text: "Too busy"}}, verdict.ReasonTemporarilyUnavail},
	} {
		c.opts.Name = "mx." + c.name + ".test"
		b.server(t, c.opts)
		c.dom.MX, c.dom.Users = mxOf(c.opts.Name), []string{"ann"}
		b.w.AddDomain(c.name+".test", c.dom)
		r := b.v.Verify(context.Background(), "ann@"+c.name+".test")
		if r.Status != verdict.StatusUnknown || r.Reason != c.want {
			t.Errorf("%s: %s/%s, want unknown/%s", c.name, r.Status, r.Reason, c.want)
		}
	}
}

// A catch-all probe that is greylisted while the address is accepted leaves the address's answer
// open for the same reason: unknown/greylisted (so that an async job is probed again), not a bare
// "inconclusive" (internal/verify/smtp: TestProbeLocalIsStable keeps the probe passing the
// greylist on the re-probe).
func TestGreylistedCatchAllProbe(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 20)
	b.server(t, mailsim.ServerOptions{Name: "mx.grey.test"})
	b.w.AddDomain("grey.test", mailsim.Domain{MX: mxOf("mx.grey.test"), Users: []string{"ann"},
		Unknown: &mailsim.Reply{Code: 451, Enhanced: "4.7.1", Text: "Greylisted, please try again later"}})
	r := b.v.Verify(context.Background(), "ann@grey.test")
	if r.Status != verdict.StatusUnknown || r.Reason != verdict.ReasonGreylisted {
		t.Errorf("ann@grey.test: %s/%s, want unknown/greylisted", r.Status, r.Reason)
	}
}

// A panic while one address of a batch is finished on a look-up goroutine (here the step's last
// act, for an address whose domain has no MX) reaches VerifyBatch's caller, in the caller's
// goroutine, before anything is probed: a caller that recovers (the list runner counts it as the
// chunk's failure, docs/lists.md, "Outages and failures") is not taken down with its process, and
// the chunk does not crash every worker it is redelivered to.
func TestVerifyBatchPanicReachesTheCaller(t *testing.T) {
	b := setup(t, 0, 4)
	b.server(t, mailsim.ServerOptions{Name: "mx.acme.test"})
	b.w.AddDomain("acme.test", mailsim.Domain{MX: mxOf("mx.acme.test"), Users: []string{"ann"}})
	b.w.AddDomain("nomx.test", mailsim.Domain{})
	b.v.finished = func(r verdict.Result) verdict.Result {
		if r.Email == "poison@nomx.test" {
			panic("cannot handle " + r.Email)
		}
		return r
	}
	got := func() (p any) {
		defer func() { p = recover() }()
		b.v.VerifyBatch(context.Background(), []string{"ann@acme.test", "poison@nomx.test", "bob@acme.test"}, nil)
		return nil
	}()
	if got != "cannot handle poison@nomx.test" {
		t.Fatalf("VerifyBatch's caller recovered %v, want the look-up goroutine's panic", got)
	}
	if n := b.w.Stats().Rcpts; n != 0 {
		t.Errorf("%d addresses probed for a batch that panicked, want none", n)
	}
}
