package api

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verifyworker"
	"github.com/mailvet/mailvet/internal/webhook"
)

// End-to-end tests of sandbox keys (docs/sandbox.md) against the real server, Postgres and
// NATS: every magic address answered as documented, nothing billed, their own rate limit,
// asynchronous jobs called back through the real webhook worker, lists run to downloadable
// results, and live keys never answered from the table.

// magicRow is one row of docs/sandbox.md's table of magic addresses.
type magicRow struct{ address, status, reason string }

var magicRowRE = regexp.MustCompile("^\\| `([^`]+@sandbox\\.mailvet\\.test)` \\| `([a-z_]+)` \\| `([a-z_0-9]+)` \\|")

// documentedMagic reads the magic addresses and their documented status and reason from
// docs/sandbox.md, the page integrators test against.
func documentedMagic(t *testing.T) []magicRow {
	t.Helper()
	raw, err := os.ReadFile("../../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []magicRow
	for _, line := range strings.Split(string(raw), "\n") {
		if m := magicRowRE.FindStringSubmatch(line); m != nil {
			rows = append(rows, magicRow{m[1], m[2], m[3]})
		}
	}
	if len(rows) < 20 {
		t.Fatalf("docs/sandbox.md lists %d magic addresses", len(rows))
	}
	return rows
}

// sandboxKey creates a sandbox key through the management API with the provisioning key mgmt.
func (b *verifyBundle) sandboxKey(mgmt string) string {
	b.t.Helper()
	r := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci", "mode": "sandbox"}).
		want(b.t, http.StatusCreated, "")
	key, _ := r.body["key"].(string)
	if !strings.HasPrefix(key, "sk_test_") || r.body["mode"] != "sandbox" || !strings.HasPrefix(r.body["prefix"].(string), "sk_test_") {
		b.t.Fatalf("created sandbox key %v", r.body)
	}
	return key
}

// assertUnbilled fails unless the account has nothing metered: no usage rows, no month counted
// or held, no live rate window, and its account shows no usage.
func (b *verifyBundle) assertUnbilled(acct, mgmt string) {
	b.t.Helper()
	if n := b.rows(acct, func(usagetest.Row) bool { return true }); n != 0 {
		b.t.Errorf("%d usage rows, want none", n)
	}
	for _, q := range []string{
		`SELECT count(*) FROM usage_monthly WHERE account_id = $1 AND (quota_units > 0 OR billable > 0 OR held > 0)`,
		`SELECT count(*) FROM usage_holds WHERE account_id = $1`,
		`SELECT count(*) FROM rate_windows WHERE account_id = $1`,
	} {
		if n := b.count(q, acct); n != 0 {
			b.t.Errorf("%s: %d", q, n)
		}
	}
	a := b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(b.t, http.StatusOK, "")
	if a.body["usage_this_month"] != 0.0 {
		b.t.Errorf("usage_this_month %v", a.body["usage_this_month"])
	}
}

// assertNeverProbed fails if the mail world was asked anything about the sandbox's domain or
// acme.test (where a live key would find ann's mailbox), or any SMTP session was opened.
func (b *verifyBundle) assertNeverProbed() {
	b.t.Helper()
	for _, name := range []string{"sandbox.mailvet.test", "acme.test"} {
		for _, qt := range []uint16{dns.TypeMX, dns.TypeA, dns.TypeAAAA} {
			if n := b.mail.DNSQueries(name, qt); n != 0 {
				b.t.Errorf("%d %s queries for %s", n, dns.TypeToString[qt], name)
			}
		}
	}
	if s := b.mail.Stats(); s.Sessions != 0 {
		b.t.Errorf("%d SMTP sessions", s.Sessions)
	}
}

func checkMagic(t *testing.T, where string, got map[string]any, want magicRow) {
	t.Helper()
	if got["status"] != want.status || got["reason"] != want.reason || got["sandbox"] != true {
		t.Errorf("%s %s: status %v, reason %v, sandbox %v; docs/sandbox.md says %s, %s",
			where, want.address, got["status"], got["reason"], got["sandbox"], want.status, want.reason)
	}
}

// TestSandboxKeyAnswersEveryMagicAddress: a sandbox key, created through the management API,
// gets every magic address's documented status and reason on the single, batch and stream
// routes, with "sandbox": true; other addresses by the syntax rule. No verifier worker runs and
// the mail world is never asked; nothing is billed, and the free plan's 10 a minute does not
// apply.
func TestSandboxKeyAnswersEveryMagicAddress(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	listed := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, http.StatusOK, "")
	if ks, _ := listed.body["keys"].([]any); len(ks) != 1 || ks[0].(map[string]any)["mode"] != "sandbox" {
		t.Fatalf("keys %v", listed.body)
	}
	magic := documentedMagic(t)

	for _, m := range magic {
		r := b.verify(key, map[string]string{"email": m.address}).want(t, http.StatusOK, "")
		checkMagic(t, "verify", r.body, m)
		if r.header.Get("RateLimit-Limit") != "1000" {
			t.Fatalf("RateLimit-Limit %q, want the sandbox's 1000", r.header.Get("RateLimit-Limit"))
		}
	}
	// Other addresses: the syntax rule. acme.test has ann's mailbox, which a live key confirms.
	for email, want := range map[string][2]string{
		"ann@acme.test":                           {"unknown", "sandbox_unlisted"},
		"nobody@sandbox.mailvet.test":             {"unknown", "sandbox_unlisted"},
		"not-an-address":                          {"invalid", "invalid_syntax"},
		"Mailbox_Full+crm-7@SANDBOX.mailvet.test": {"unknown", "mailbox_full"},
	} {
		r := b.verify(key, map[string]string{"email": email}).want(t, http.StatusOK, "")
		if r.body["status"] != want[0] || r.body["reason"] != want[1] || r.body["sandbox"] != true {
			t.Errorf("%s: %v, want %v", email, r.body, want)
		}
	}

	emails := make([]string, len(magic))
	for i, m := range magic {
		emails[i] = m.address
	}
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).want(t, http.StatusOK, "")
	results, _ := r.body["results"].([]any)
	if len(results) != len(magic) {
		t.Fatalf("batch: %v", r.body)
	}
	for i, m := range magic {
		checkMagic(t, "batch", results[i].(map[string]any), m)
	}

	lines, _ := streamLines(t, b, key, emails, nil)
	if len(lines) != len(magic) {
		t.Fatalf("stream: %d lines for %d addresses", len(lines), len(magic))
	}
	byEmail := map[string]map[string]any{}
	for _, l := range lines {
		byEmail[l["email"].(string)] = l
	}
	for _, m := range magic {
		checkMagic(t, "stream", byEmail[m.address], m)
	}

	b.assertUnbilled(a.ID, mgmt)
	b.assertNeverProbed()
}

// TestSandboxRateLimit: sandbox keys have their own limit (MAILVET_SANDBOX_RATE_PER_MIN),
// counted in Postgres across replicas — two servers share one window — and apart from the live
// limit: the live key of the same account still passes. A refusal is 429 rate_limit_exceeded, as
// live, and leaves no usage row.
func TestSandboxRateLimit(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Minute).Add(10 * time.Second) // one window for the whole test
	b := setupVerify(t, verifyOpts{noWorkers: true, now: now, env: map[string]string{"MAILVET_SANDBOX_RATE_PER_MIN": "5"}})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw
	other := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "replica-2"), Pool: b.pool, Ready: health.NewChecker(0), Local: b.engine,
		Now: func() time.Time { return now }})
	t.Cleanup(other.Close)
	one := map[string]string{"email": "accepted@sandbox.mailvet.test"}

	for i := range 5 {
		h := b.srv.Handler()
		if i%2 == 1 {
			h = other.Handler()
		}
		r := callHandler(t, h, http.MethodPost, "/v1/email/verify", key, one).want(t, http.StatusOK, "")
		if r.header.Get("RateLimit-Limit") != "5" || r.header.Get("RateLimit-Remaining") != fmt.Sprint(4-i) {
			t.Errorf("request %d: RateLimit-Limit %q, Remaining %q", i, r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"))
		}
	}
	r := callHandler(t, other.Handler(), http.MethodPost, "/v1/email/verify", key, one).want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	if r.body["limit"] != 5.0 || r.header.Get("Retry-After") == "" || !strings.HasPrefix(r.body["message"].(string), "Sandbox rate limit of 5 emails per minute") {
		t.Errorf("refusal %v, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	// A batch larger than the whole window can never pass: no Retry-After.
	six := []string{"a@b.test", "c@d.test", "e@f.test", "g@h.test", "i@j.test", "k@l.test"}
	r = b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": six}).want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a batch larger than the limit", r.header.Get("Retry-After"))
	}
	// The live key of the account has its own window (the free plan's 10), untouched.
	r = b.verify(live, map[string]string{"email": "not-an-address"}).want(t, http.StatusOK, "")
	if r.header.Get("RateLimit-Limit") != "10" || r.header.Get("RateLimit-Remaining") != "9" || r.body["sandbox"] != nil {
		t.Errorf("live answer %v, RateLimit %q/%q", r.body, r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"))
	}
	if n := b.count(`SELECT count(*) FROM usage_log u JOIN api_keys k ON k.id = u.key_id WHERE k.mode = 'sandbox' AND k.account_id = $1`, a.ID); n != 0 {
		t.Errorf("%d usage rows of the sandbox key, its refusals included; want none", n)
	}
	if n := b.count(`SELECT used FROM sandbox_rate_windows WHERE account_id = $1`, a.ID); n != 5 {
		t.Errorf("sandbox window used %d, want 5", n)
	}
}

// hookReceiver is an HTTPS callback receiver on loopback, reached as hooks.sandbox.test through
// the mail world's DNS, with a webhook worker (the real delivery path) that trusts its CA.
type hookReceiver struct {
	url  string
	hits chan []byte // bodies whose signature checked out with secret
	bad  chan string
}

const hookSecret = "sandbox-webhook-secret"

func startHookReceiver(t *testing.T, b *verifyBundle) *hookReceiver {
	t.Helper()
	return startHookReceiverWith(t, b, true)
}

// startHookReceiverWith is startHookReceiver whose webhook worker delivers to private and
// loopback addresses only when allowPrivate (MAILVET_WEBHOOK_ALLOW_PRIVATE).
func startHookReceiverWith(t *testing.T, b *verifyBundle, allowPrivate bool) *hookReceiver {
	t.Helper()
	const host = "hooks.sandbox.test"
	ca := tlstest.New(t, host)
	h := &hookReceiver{hits: make(chan []byte, 16), bad: make(chan string, 16)}
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]byte(hookSecret), raw, r.Header.Get(webhook.SignatureHeader)); err != nil {
			h.bad <- fmt.Sprintf("signature: %v: %s", err, raw)
		} else {
			h.hits <- raw
		}
		w.WriteHeader(http.StatusOK)
	}))
	rc.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf}}
	rc.StartTLS()
	t.Cleanup(rc.Close)
	b.mail.AddDomain(host, mailsim.Domain{A: []string{"127.0.0.1"}})
	h.url = fmt.Sprintf("https://%s:%d/mailvet", host, rc.Listener.Addr().(*net.TCPAddr).Port)

	nc, err := nats.Connect(b.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ww, err := webhook.NewWorker(b.pool, js, webhook.Options{
		Client: webhook.ClientOptions{AllowPrivate: allowPrivate, DNSResolver: b.cfg.DNSResolver, RootCAs: ca.Pool},
		Log:    app.NewLogger(io.Discard, "webhook"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{ww.Run, ww.RunSweeper} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })
	return h
}

// next is the next signed callback, within 20 s.
func (h *hookReceiver) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case raw := <-h.hits:
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("callback %s: %v", raw, err)
		}
		return m
	case bad := <-h.bad:
		t.Fatalf("callback refused: %s", bad)
	case <-time.After(20 * time.Second):
		t.Fatal("no callback within 20 s")
	}
	return nil
}

// TestSandboxAsyncJobCallsBack: an asynchronous request with a sandbox key completes without any
// verifier worker, and its callback goes through the real webhook worker: signed with the
// caller's secret, POSTed to a receiver on loopback, logged as delivered. Nothing is billed.
func TestSandboxAsyncJobCallsBack(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	hook := startHookReceiver(t, b)

	r := b.verify(key, map[string]string{"email": "catch_all@sandbox.mailvet.test", "webhook_url": hook.url, "webhook_secret": hookSecret}).
		want(t, http.StatusAccepted, "")
	jobID, _ := r.body["job_id"].(string)
	cb := hook.next(t)
	if cb["job_id"] != jobID || cb["status"] != "catch_all" || cb["reason"] != "catch_all" || cb["sandbox"] != true || cb["catch_all"] != true {
		t.Fatalf("callback %v for job %s", cb, jobID)
	}
	job := b.call(http.MethodGet, "/v1/email/jobs/"+jobID, key, nil).want(t, http.StatusOK, "").body
	if res, _ := job["result"].(map[string]any); job["status"] != "completed" || res["sandbox"] != true || res["job_id"] != jobID {
		t.Errorf("job %v", job)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.count(`SELECT count(*) FROM deliveries WHERE job_id = $1 AND state = 'delivered'`, jobID) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the delivery was not logged as delivered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := b.call(http.MethodGet, "/v1/management/deliveries", mgmt, nil).want(t, http.StatusOK, "")
	if ds, _ := d.body["deliveries"].([]any); len(ds) != 1 {
		t.Errorf("deliveries %v", d.body)
	}
	b.assertUnbilled(a.ID, mgmt)
	if n := b.mail.DNSQueries("sandbox.mailvet.test", dns.TypeMX); n != 0 || b.mail.Stats().Sessions != 0 {
		t.Errorf("the job was probed: %d MX queries, %d sessions", n, b.mail.Stats().Sessions)
	}
}

// TestSandboxListCompletes: a list uploaded with a sandbox key runs on the real list runner to
// completion, is answered from the table (never probed), calls back signed, downloads with every
// documented answer, and bills nothing.
func TestSandboxListCompletes(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	hook := startHookReceiver(t, b)
	magic := documentedMagic(t)
	want := map[string]magicRow{}
	var file strings.Builder
	for _, m := range magic {
		file.WriteString(m.address + "\n")
		want[m.address] = m
	}
	file.WriteString("ann@acme.test\nnot-an-address\n")
	want["ann@acme.test"] = magicRow{"ann@acme.test", "unknown", "sandbox_unlisted"}
	want["not-an-address"] = magicRow{"not-an-address", "invalid", "invalid_syntax"}

	r := b.call(http.MethodPost, "/v1/email/lists?name=sandbox&webhook_url="+hook.url, key, file.String(),
		"Content-Type", "text/plain", "Mailvet-Webhook-Secret", hookSecret).want(t, http.StatusAccepted, "")
	id, _ := r.body["id"].(string)
	if r.body["sandbox"] != true {
		t.Errorf("upload answer %v", r.body)
	}
	l := b.waitList(key, id, "completed")
	if l["verified"] != float64(len(want)) || l["sandbox"] != true {
		t.Fatalf("list %v", l)
	}
	cb := hook.next(t)
	if cb["event"] != "list.completed" || cb["list"].(map[string]any)["id"] != id {
		t.Errorf("callback %v", cb)
	}
	_, body := b.download(key, id, "?format=ndjson")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d result lines for %d rows", len(lines), len(want))
	}
	for _, line := range lines {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		res, _ := row["result"].(map[string]any)
		w, ok := want[row["email"].(string)]
		if !ok || res == nil {
			t.Errorf("row %s", line)
			continue
		}
		checkMagic(t, "list", res, w)
	}
	b.assertUnbilled(a.ID, mgmt)
	b.assertNeverProbed()
}

// TestLiveKeyOnMagicAddressGetsTheEngine: a live key is never answered from the table: a magic
// address gets what the verification engine says about it (the reserved .test domain has no
// mail), with no sandbox field, and is billed as any address.
func TestLiveKeyOnMagicAddressGetsTheEngine(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, live := b.customer(plan.Builder)
	for _, email := range []string{"accepted@sandbox.mailvet.test", "catch_all@sandbox.mailvet.test"} {
		engine := b.engine.Verify(context.Background(), email)
		r := b.verify(live, map[string]string{"email": email}).want(t, http.StatusOK, "")
		if _, ok := r.body["sandbox"]; ok || r.body["status"] != string(engine.Status) || r.body["reason"] != string(engine.Reason) {
			t.Errorf("%s: %v; the engine says %s, %s", email, r.body, engine.Status, engine.Reason)
		}
		if r.body["reason"] == "accepted" || r.body["reason"] == "catch_all" {
			t.Errorf("%s: a live key got the sandbox's answer %v", email, r.body)
		}
	}
	if n := b.mail.DNSQueries("sandbox.mailvet.test", dns.TypeMX); n == 0 {
		t.Error("the live key's addresses were not looked up")
	}
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.Billable }); n != 2 {
		t.Errorf("%d billable rows, want 2", n)
	}
}

// TestKeyModes: the management API's mode field: live by default, sandbox on request, anything
// else refused; live and sandbox keys count together toward the plan's maximum.
func TestKeyModes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "") // max_keys 2
	r := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "prod"}).want(t, http.StatusCreated, "")
	if r.body["mode"] != "live" || !strings.HasPrefix(r.body["key"].(string), "sk_live_") {
		t.Errorf("default key %v", r.body)
	}
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "x", "mode": "test"}).want(t, http.StatusBadRequest, CodeInvalidRequest)
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]any{"label": "x", "mode": nil}).want(t, http.StatusCreated, "")
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci", "mode": "sandbox"}).want(t, http.StatusTooManyRequests, "key_limit_reached")
	l := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, http.StatusOK, "")
	if l.body["count"] != 2.0 {
		t.Errorf("keys %v", l.body)
	}
}

// TestSandboxIdempotencyKeysApart: one Idempotency-Key sent with the account's live key and then
// with its sandbox key names two requests: the sandbox request is not answered with the live
// job, and its own retry replays its own answer.
func TestSandboxIdempotencyKeysApart(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw
	body := map[string]string{"email": "accepted@sandbox.mailvet.test", "webhook_url": "https://hooks.example.com/mailvet"}
	idem := []string{"Idempotency-Key", "order-42"}

	first := b.call(http.MethodPost, "/v1/email/verify", live, body, idem...).want(t, http.StatusAccepted, "")
	second := b.call(http.MethodPost, "/v1/email/verify", sandbox, body, idem...).want(t, http.StatusAccepted, "")
	if second.body["job_id"] == first.body["job_id"] || second.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the sandbox request got the live one's answer: %v, %v", second.body, second.header)
	}
	again := b.call(http.MethodPost, "/v1/email/verify", sandbox, body, idem...).want(t, http.StatusAccepted, "")
	if again.body["job_id"] != second.body["job_id"] || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the sandbox retry: %v, %v", again.body, again.header)
	}
	job := b.call(http.MethodGet, "/v1/email/jobs/"+second.body["job_id"].(string), sandbox, nil).want(t, http.StatusOK, "").body
	if res, _ := job["result"].(map[string]any); job["status"] != "completed" || res["sandbox"] != true || res["reason"] != "accepted" {
		t.Errorf("the sandbox job %v", job)
	}
	liveJob := b.call(http.MethodGet, "/v1/email/jobs/"+first.body["job_id"].(string), live, nil).want(t, http.StatusOK, "").body
	if liveJob["status"] == "completed" || liveJob["result"] != nil {
		t.Errorf("the live job (no worker runs) %v", liveJob)
	}
}

// TestSandboxAndLiveDataApart: the jobs and lists of an account's sandbox keys and those of its
// live keys are two sets of data (docs/sandbox.md, "Live and sandbox data are kept apart"): a
// sandbox key can neither read nor change a live job or list — by id, in the list of lists, by
// downloading, canceling or deleting it, or by deleting an address's history — and a live key
// does not see the sandbox's jobs and lists. Each is answered 404, as another account's would be.
func TestSandboxAndLiveDataApart(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw

	hook := startHookReceiver(t, b)
	async := map[string]string{"email": "ann@acme.test", "webhook_url": hook.url, "webhook_secret": hookSecret}
	liveJob := b.verify(live, async).want(t, http.StatusAccepted, "").body["job_id"].(string)
	sandboxJob := b.verify(sandbox, async).want(t, http.StatusAccepted, "").body["job_id"].(string)
	hook.next(t)
	hook.next(t)
	b.verify(live, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusOK, "")
	upload := func(key string) string {
		r := b.call(http.MethodPost, "/v1/email/lists?name=n", key, "ann@acme.test\nbob@acme.test\n", "Content-Type", "text/plain").
			want(t, http.StatusAccepted, "")
		return r.body["id"].(string)
	}
	liveList, sandboxList := upload(live), upload(sandbox)
	b.waitList(live, liveList, "completed")
	b.waitList(sandbox, sandboxList, "completed")

	for _, c := range []struct{ key, job, list, own string }{
		{sandbox, liveJob, liveList, sandboxList},
		{live, sandboxJob, sandboxList, liveList},
	} {
		b.call(http.MethodGet, "/v1/email/jobs/"+c.job, c.key, nil).want(t, http.StatusNotFound, "job_not_found")
		b.call(http.MethodGet, "/v1/email/lists/"+c.list, c.key, nil).want(t, http.StatusNotFound, "list_not_found")
		if resp, body := b.download(c.key, c.list, ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("download of the other mode's list: %d %s", resp.StatusCode, body)
		}
		b.call(http.MethodPost, "/v1/email/lists/"+c.list+"/cancel", c.key, nil).want(t, http.StatusNotFound, "list_not_found")
		b.call(http.MethodDelete, "/v1/email/lists/"+c.list, c.key, nil).want(t, http.StatusNotFound, "list_not_found")
		page := b.call(http.MethodGet, "/v1/email/lists", c.key, nil).want(t, http.StatusOK, "").body
		if ls, _ := page["lists"].([]any); len(ls) != 1 || ls[0].(map[string]any)["id"] != c.own {
			t.Errorf("lists seen: %v; want only %s", page, c.own)
		}
	}

	// The account-wide routes (the delivery log, its replay, usage) take the provisioning key only.
	for _, r := range []struct{ method, path string }{{http.MethodGet, "/v1/management/deliveries"},
		{http.MethodPost, "/v1/management/deliveries/" + newUUID() + "/retry"}, {http.MethodGet, "/v1/management/usage/summary"}} {
		if got := b.call(r.method, r.path, sandbox, nil); got.status != http.StatusForbidden && got.status != http.StatusUnauthorized {
			t.Errorf("%s %s with a sandbox key: %d %v", r.method, r.path, got.status, got.body)
		}
	}

	// The sandbox key's history deletion reaches the sandbox's data only.
	deadline := time.Now().Add(10 * time.Second)
	for b.count(`SELECT count(*) FROM deliveries WHERE account_id = $1 AND state = 'delivered'`, a.ID) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the callbacks were not logged as delivered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test", sandbox, nil).want(t, http.StatusOK, "").body
	if del, _ := d["deleted"].(map[string]any); del["jobs"] != 1.0 || del["list_rows"] != 1.0 || del["results"] != 0.0 {
		t.Errorf("sandbox history deletion %v; want its own job and list row only", d)
	}
	job := b.call(http.MethodGet, "/v1/email/jobs/"+liveJob, live, nil).want(t, http.StatusOK, "").body
	if job["email"] != "ann@acme.test" {
		t.Errorf("the live job lost its address to the sandbox key's deletion: %v", job)
	}
	if _, body := b.download(live, liveList, "?format=ndjson"); !strings.Contains(body, "ann@acme.test") {
		t.Errorf("the live list lost ann's row to the sandbox key's deletion: %s", body)
	}
	if n := b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND snapshot IS NOT NULL`, a.ID); n == 0 {
		t.Error("the live results' snapshots are gone")
	}
}

// TestSandboxHistoryDeletionKeepsLiveReplays: a sandbox key's DELETE /v1/email/history reaches
// the sandbox's data only (docs/sandbox.md, "Live and sandbox data are kept apart"), also among
// the responses kept for Idempotency-Key replays: the live key's kept answer naming the address
// stays, and its retry is still a replay, not a second verification billed again. A live key's
// deletion reaches both.
func TestSandboxHistoryDeletionKeepsLiveReplays(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw
	body := map[string]string{"email": "ann@acme.test"}
	idem := []string{"Idempotency-Key", "order-7"}
	b.call(http.MethodPost, "/v1/email/verify", live, body, idem...).want(t, http.StatusOK, "")
	b.call(http.MethodPost, "/v1/email/verify", sandbox, body, idem...).want(t, http.StatusOK, "")
	b.settle()
	kept := `SELECT count(*) FROM idempotency_keys WHERE account_id = $1 AND status IS NOT NULL`
	if n := b.count(kept, a.ID); n != 2 {
		t.Fatalf("%d kept responses; want the live one and the sandbox one", n)
	}

	b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test", sandbox, nil).want(t, http.StatusOK, "")
	if n := b.count(kept, a.ID); n != 1 {
		t.Errorf("%d kept responses after the sandbox key's deletion; want the live one", n)
	}
	if r := b.call(http.MethodPost, "/v1/email/verify", live, body, idem...).want(t, http.StatusOK, ""); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the live retry after the sandbox key's deletion was not a replay: %v", r.header)
	}
	b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test", live, nil).want(t, http.StatusOK, "")
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE account_id = $1`, a.ID); n != 0 {
		t.Errorf("%d kept responses after the live key's deletion; want none", n)
	}
}

// TestSandboxIdempotencyKeyNotReachableLive: whatever Idempotency-Key a live key sends, it never
// names a sandbox request's stored answer, also one spelled as the sandbox's own keys are stored.
func TestSandboxIdempotencyKeyNotReachableLive(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw
	body := map[string]string{"email": "accepted@sandbox.mailvet.test", "webhook_url": "https://hooks.example.com/mailvet"}

	first := b.call(http.MethodPost, "/v1/email/verify", sandbox, body, "Idempotency-Key", "order-42").want(t, http.StatusAccepted, "")
	sum := sha256.Sum256([]byte("order-42"))
	for _, k := range []string{"order-42", "sandbox:" + hex.EncodeToString(sum[:])} {
		r := b.call(http.MethodPost, "/v1/email/verify", live, body, "Idempotency-Key", k).want(t, http.StatusAccepted, "")
		if r.body["job_id"] == first.body["job_id"] || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("Idempotency-Key %q: the live key got the sandbox request's answer %v", k, r.body)
		}
	}
}

// TestSandboxCallbacksKeepTheSSRFRules pins that a sandbox key is no free SSRF probe: its
// callback URLs pass the same checks as live ones (an IP address is refused at once), and its
// callbacks go through the webhook workers' dial-time guard, so a host that resolves to loopback
// is never called unless MAILVET_WEBHOOK_ALLOW_PRIVATE allows it.
func TestSandboxCallbacksKeepTheSSRFRules(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	hook := startHookReceiverWith(t, b, false)

	for _, u := range []string{"https://127.0.0.1/x", "https://[::1]/x", "http://hooks.sandbox.test/x"} {
		b.verify(key, map[string]string{"email": "accepted@sandbox.mailvet.test", "webhook_url": u}).
			want(t, http.StatusBadRequest, CodeInvalidRequest)
		b.call(http.MethodPost, "/v1/email/lists?webhook_url="+u, key, "accepted@sandbox.mailvet.test\n", "Content-Type", "text/plain").
			want(t, http.StatusBadRequest, CodeInvalidRequest)
	}
	r := b.verify(key, map[string]string{"email": "accepted@sandbox.mailvet.test", "webhook_url": hook.url, "webhook_secret": hookSecret}).
		want(t, http.StatusAccepted, "")
	deadline := time.Now().Add(20 * time.Second)
	for b.count(`SELECT count(*) FROM deliveries WHERE job_id = $1 AND attempts > 0 AND last_error <> ''`, r.body["job_id"]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox callback was not attempted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case raw := <-hook.hits:
		t.Fatalf("a sandbox callback reached a loopback receiver: %s", raw)
	case bad := <-hook.bad:
		t.Fatalf("a sandbox callback reached a loopback receiver: %s", bad)
	case <-time.After(200 * time.Millisecond):
	}
	if n := b.count(`SELECT count(*) FROM deliveries WHERE account_id = $1 AND state = 'delivered'`, a.ID); n != 0 {
		t.Errorf("%d deliveries to loopback delivered", n)
	}
}

// TestSandboxLargeListNeverProbes pins that a sandbox list of 20,000 addresses that are none of
// the magic ones, on 5,000 domains, runs to completion on the real verifier workers without a
// single DNS query or SMTP session, and bills nothing.
func TestSandboxLargeListNeverProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 rows at the sandbox pace")
	}
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, mgmt := b.account(plan.Free, "")
	key := b.sandboxKey(mgmt)
	const n = 20_000
	before := b.mail.DNSStats().Queries
	id := b.uploadSandboxList(key, n)
	l := b.waitSandboxList(key, id, n).body
	if l["state"] != "completed" || l["verified"] != float64(n) {
		t.Fatalf("list %v", l)
	}
	if q := b.mail.DNSStats().Queries - before; q != 0 {
		t.Errorf("%d DNS queries for a sandbox list", q)
	}
	if s := b.mail.Stats(); s.Sessions != 0 {
		t.Errorf("%d SMTP sessions for a sandbox list", s.Sessions)
	}
	b.assertUnbilled(a.ID, mgmt)
}

// TestSandboxListPacedBesideLiveTraffic pins the pace of sandbox lists (docs/sandbox.md, "Bulk
// lists"): the sandbox answers without I/O, so a sandbox list is held to
// verifyworker.SandboxListRate addresses a second, and another customer's live verifications,
// sent one after another while it runs, are all answered 200 within the documented 10 seconds
// (docs/api.md), none 503: an unpaced list's writes would take the Postgres connections the API
// shares here with the worker, and the live requests' key checks would run out of time.
func TestSandboxListPacedBesideLiveTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 rows at the sandbox pace")
	}
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, mgmt := b.account(plan.Free, "")
	sandbox := b.sandboxKey(mgmt)
	_, live := b.customer(plan.Scale)

	type answer struct {
		status int
		took   time.Duration
	}
	stop, answers := make(chan struct{}), make(chan []answer, 1)
	go func() {
		var got []answer
		for {
			select {
			case <-stop:
				answers <- got
				return
			case <-time.After(100 * time.Millisecond): // about 550 a minute, under Scale's 1,000
			}
			start := time.Now()
			r := b.verify(live, map[string]string{"email": "ann@acme.test"})
			got = append(got, answer{r.status, time.Since(start)})
		}
	}()
	const n = 20_000
	id := b.uploadSandboxList(sandbox, n)
	got := b.waitSandboxList(sandbox, id, n)
	close(stop)
	sent := <-answers

	l := got.body
	if l["state"] != "completed" || l["verified"] != float64(n) {
		t.Fatalf("list %v", l)
	}
	// The API shows whole seconds; the list's row has the microseconds.
	var took time.Duration
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT finished_at - started_at FROM lists WHERE id = $1`, id).Scan(&took), "list duration")
	rate := float64(n) / took.Seconds()
	var refused, slow int
	var slowest time.Duration
	for _, a := range sent {
		if a.status != http.StatusOK {
			refused++
		}
		if a.took > 10*time.Second {
			slow++
		}
		slowest = max(slowest, a.took)
	}
	t.Logf("sandbox list: %d addresses in %v, %.0f a second; live: %d requests, %d not 200, slowest %v; list GETs not 200: %d",
		n, took.Round(time.Millisecond), rate, len(sent), refused, slowest.Round(time.Millisecond), got.refused)
	if rate > verifyworker.SandboxListRate {
		t.Errorf("the sandbox list ran at %.0f addresses a second; the bound is %d", rate, verifyworker.SandboxListRate)
	}
	if len(sent) < 10 {
		t.Errorf("only %d live requests ran beside the list", len(sent))
	}
	if refused > 0 || slow > 0 || got.refused > 0 {
		t.Errorf("beside the sandbox list, %d of %d live verifications were not answered 200 and %d took over 10 s; %d of the list's GETs were not answered 200",
			refused, len(sent), slow, got.refused)
	}
}

// uploadSandboxList uploads a sandbox list of n addresses that are none of the magic ones, on
// 5,000 domains, and returns its id.
func (b *verifyBundle) uploadSandboxList(key string, n int) string {
	b.t.Helper()
	var file strings.Builder
	for i := range n {
		fmt.Fprintf(&file, "user%d@d%d.example.com\n", i, i%5000)
	}
	r := b.call(http.MethodPost, "/v1/email/lists?name=big", key, file.String(), "Content-Type", "text/plain").
		want(b.t, http.StatusAccepted, "")
	id, _ := r.body["id"].(string)
	return id
}

// polledList is a list as its last GET showed it, and how many of the GETs were not answered 200.
type polledList struct {
	body    map[string]any
	refused int
}

// waitSandboxList polls list id until it completes, for at most three times as long as n
// addresses take at the sandbox's pace. A GET not answered 200 is counted and polled again, so
// that a caller can tell how the API answered while the list ran.
func (b *verifyBundle) waitSandboxList(key, id string, n int) polledList {
	b.t.Helper()
	deadline := time.Now().Add(10*time.Second + 3*time.Duration(n)*time.Second/verifyworker.SandboxListRate)
	var p polledList
	for {
		got := b.call(http.MethodGet, "/v1/email/lists/"+id, key, nil)
		if got.status == http.StatusOK {
			p.body = got.body
		} else {
			p.refused++
		}
		if p.body["state"] == "completed" || time.Now().After(deadline) {
			return p
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestExportMarksSandboxData: the account export holds the sandbox's keys, jobs and lists with
// the live ones, each marked by its mode (docs/personal-data.md, "Export"), so that the sandbox's
// answers are never read as verifications of the addresses.
func TestExportMarksSandboxData(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	live := b.standardKey(a.ID).Raw
	async := map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}
	liveJob := b.verify(live, async).want(t, http.StatusAccepted, "").body["job_id"]
	sandboxJob := b.verify(sandbox, async).want(t, http.StatusAccepted, "").body["job_id"]
	upload := func(key string) any {
		return b.call(http.MethodPost, "/v1/email/lists", key, "ann@acme.test\n", "Content-Type", "text/plain").
			want(t, http.StatusAccepted, "").body["id"]
	}
	liveList, sandboxList := upload(live), upload(sandbox)

	ex := b.call(http.MethodGet, "/v1/management/account/export", mgmt, nil).want(t, http.StatusOK, "").body
	modes := map[any]any{}
	for _, section := range []struct{ name, id, mark string }{{"keys", "prefix", "mode"}, {"jobs", "job_id", "sandbox"}, {"lists", "id", "sandbox"}} {
		for _, e := range ex[section.name].([]any) {
			m := e.(map[string]any)
			id := m[section.id]
			if s, ok := id.(string); ok && section.name == "keys" {
				id = s[:len("sk_test_")]
			}
			modes[id] = m[section.mark]
		}
	}
	for id, want := range map[any]any{"sk_test_": "sandbox", "sk_live_": "live", liveJob: false, sandboxJob: true, liveList: false, sandboxList: true} {
		if modes[id] != want {
			t.Errorf("export: %v is marked %v, want %v (all: %v)", id, modes[id], want, modes)
		}
	}
}

// TestSandboxPassesAnExhaustedQuota pins that the sandbox needs no quota room: once the live key
// has used the whole monthly quota, the account's sandbox key still verifies on every route and
// uploads lists, and the quota used stays where the live key left it.
func TestSandboxPassesAnExhaustedQuota(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS": "5", "MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	a, mgmt := b.account(plan.Free, "")
	live := b.standardKey(a.ID).Raw
	sandbox := b.sandboxKey(mgmt)
	for i := range 5 {
		b.verify(live, map[string]string{"email": fmt.Sprintf("bad%d", i)}).want(t, http.StatusOK, "")
	}
	b.verify(live, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusTooManyRequests, CodeMonthlyQuotaExceeded)

	b.verify(sandbox, map[string]string{"email": "accepted@sandbox.mailvet.test"}).want(t, http.StatusOK, "")
	b.call(http.MethodPost, "/v1/email/verify/batch", sandbox, map[string]any{"emails": []string{"a@acme.test", "b@acme.test"}}).
		want(t, http.StatusOK, "")
	b.verify(sandbox, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x"}).want(t, http.StatusAccepted, "")
	id := b.call(http.MethodPost, "/v1/email/lists", sandbox, "ann@acme.test\nbob@acme.test\n", "Content-Type", "text/plain").
		want(t, http.StatusAccepted, "").body["id"].(string)
	b.waitList(sandbox, id, "completed")
	if n := b.count(`SELECT coalesce(sum(quota_units), 0)::int FROM usage_monthly WHERE account_id = $1`, a.ID); n != 5 {
		t.Errorf("quota used %d, want the live key's 5", n)
	}
}
