package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verification"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// Fault tests of docs/reliability.md: the API's NATS connection goes through a TCP proxy that the
// test cuts while batches and streams are in flight. The verifier worker keeps its own
// connection, so its answers are published while the API cannot receive them; before the
// dispatcher re-asked for missing answers, those results were lost and the request waited out
// its deadline.

// setupFault is a verify bundle whose API reaches NATS through a proxy, with a mail server that
// answers "lag.test" slowly, so that work is still in flight when the proxy is cut.
func setupFault(t *testing.T) *verifyBundle {
	t.Helper()
	b := setupVerify(t, verifyOpts{proxyNATS: true, env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	if _, err := b.mail.AddServer(mailsim.ServerOptions{Name: "mx.lag.test"}); err != nil {
		t.Fatal(err)
	}
	b.mail.AddDomain("lag.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.lag.test"}}, Users: []string{"sue"}, RcptDelay: 600 * time.Millisecond})
	return b
}

// faultList is n addresses: most answered at once, every fifth one by the slow server.
func faultList(n int) []string { return everyNth(n, 5, "sue+%d@lag.test", "user%d@acme.test") }

// streamLines posts a stream and returns its lines as they arrive, calling onFirst (if not nil)
// once the first line is in.
func streamLines(t *testing.T, b *verifyBundle, key string, emails []string, onFirst func()) (lines []map[string]any, raw [][]byte) {
	t.Helper()
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	body, _ := json.Marshal(map[string]any{"emails": emails})
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/email/verify/stream", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Timeout: 60 * time.Second} // the stream's own deadline is 120 s: fail, don't hang
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
		raw = append(raw, append([]byte(nil), sc.Bytes()...))
		if len(lines) == 1 && onFirst != nil {
			onFirst()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream after %d lines: %v", len(lines), err)
	}
	return lines, raw
}

// blip cuts the API's NATS connection for d.
func blip(b *verifyBundle, d time.Duration) {
	b.natsProxy.Cut()
	time.Sleep(d)
	b.natsProxy.Restore()
}

// assertUsage checks that the account was charged for exactly the delivered results: one usage
// row each, as many billable and (free tier) quota units, and nothing for the rest.
func assertUsage(t *testing.T, b *verifyBundle, acct string, delivered int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second) // the rows of delivered items land just after the response
	for {
		rows := b.rows(acct, usagetest.Delivered)
		billable := b.usage(acct).Billable
		quota := b.usage(acct).Quota
		if rows == delivered && billable == delivered && quota == delivered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage: %d rows, %d billable, %d quota units; want %d of each (the results delivered)", rows, billable, quota, delivered)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A stream whose API loses its NATS connection for a second mid-way still delivers every result,
// each once, and is charged exactly once per result.
func TestStreamSurvivesNATSBlip(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	acct, key := b.customer(plan.Free)
	emails := faultList(50)
	start := time.Now()
	lines, raw := streamLines(t, b, key, emails, func() { blip(b, 1500*time.Millisecond) })
	took := time.Since(start)

	seen := map[string]int{}
	for i, l := range lines {
		if _, isErr := l["error"]; isErr {
			t.Fatalf("line %d is an error after a 1.5 s blip: %s", i, raw[i])
		}
		assertSchema(t, loadSpecSchema(t, "StreamResult"), raw[i], "stream line")
		seen[l["email"].(string)]++
	}
	for _, e := range emails {
		if seen[e] != 1 {
			t.Errorf("%s: %d lines, want 1", e, seen[e])
		}
	}
	if len(lines) != len(emails) {
		t.Fatalf("%d lines for %d emails", len(lines), len(emails))
	}
	if took > 20*time.Second {
		t.Errorf("the stream took %v; the lost answers were not asked for again promptly", took)
	}
	assertUsage(t, b, acct, len(emails))
}

// The same for a batch: one answer, complete and in input order, charged once per email.
func TestBatchSurvivesNATSBlip(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	acct, key := b.customer(plan.Free)
	emails := faultList(40)
	go func() {
		// Once the mail servers have been asked (the batch is past the dispatcher's check of the
		// link, which refuses a new batch at once while NATS is down), the fast answers come in
		// and the slow ones are on their way; a fixed wait would race the request under load.
		deadline := time.Now().Add(10 * time.Second)
		for b.mail.Stats().Rcpts == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		blip(b, 1500*time.Millisecond)
	}()
	start := time.Now()
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).want(t, 200, "")
	results := r.body["results"].([]any)
	if len(results) != len(emails) {
		t.Fatalf("%d results for %d emails", len(results), len(emails))
	}
	for i, x := range results {
		if got := x.(map[string]any)["email"]; got != emails[i] {
			t.Errorf("result %d is %v, want %s", i, got, emails[i])
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the batch took %v", took)
	}
	assertUsage(t, b, acct, len(emails))
}

// A stream whose connection stays down ends with an error line that lists exactly the emails
// without a result; only the delivered results are charged.
func TestStreamEndsWithErrorLineWhenNATSStaysDown(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	b.srv.dispatch.ListGrace = time.Second
	acct, key := b.customer(plan.Free)
	emails := faultList(50)
	lines, raw := streamLines(t, b, key, emails, func() { b.natsProxy.Cut() })
	if len(lines) < 2 {
		t.Fatalf("%d lines", len(lines))
	}
	last := lines[len(lines)-1]
	if last["error"] != CodeServiceUnavailable {
		t.Fatalf("last line %s is not the service_unavailable error line", raw[len(raw)-1])
	}
	assertSchema(t, loadSpecSchema(t, "StreamError"), raw[len(raw)-1], "stream error line")
	assertEnvelope(t, last, CodeServiceUnavailable)

	got := map[string]bool{}
	for i, l := range lines[:len(lines)-1] {
		if _, isErr := l["error"]; isErr {
			t.Fatalf("error line %d is not the last: %s", i, raw[i])
		}
		got[l["email"].(string)] = true
	}
	var missing []string
	indexes := last["indexes"].([]any)
	for k, e := range last["emails"].([]any) {
		if got[e.(string)] {
			t.Errorf("%s is both delivered and listed as not verified", e)
		}
		if i := int(indexes[k].(float64)); emails[i] != e {
			t.Errorf("the error line's index %d names %s, not %s", i, emails[i], e)
		}
		missing = append(missing, e.(string))
	}
	if len(indexes) != len(last["emails"].([]any)) {
		t.Errorf("%d indexes for %d emails in the error line", len(indexes), len(last["emails"].([]any)))
	}
	if len(got)+len(missing) != len(emails) || len(missing) == 0 {
		t.Fatalf("%d delivered + %d listed as not verified, want %d in all, some missing", len(got), len(missing), len(emails))
	}
	if !sort.SliceIsSorted(missing, func(i, j int) bool { return indexOf(emails, missing[i]) < indexOf(emails, missing[j]) }) {
		t.Errorf("the missing emails are not in input order: %v", missing)
	}
	assertUsage(t, b, acct, len(got))
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// With NATS unreachable, every route that needs the fleet answers 503 within a second, instead of
// waiting behind a reconnect, and charges nothing; addresses decided locally still work; and the
// routes work again once NATS is back.
func TestFleetRoutesFailFastWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	acct, key := b.customer(plan.Builder)
	b.natsProxy.Cut()
	wait.For(t, 15*time.Second, "the API to see NATS down", func() bool { return !b.srv.dispatch.Up() })

	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/email/verify", map[string]any{"email": "ann@acme.test"}},
		{"/v1/email/verify", map[string]any{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x"}},
		{"/v1/email/verify/batch", map[string]any{"emails": []string{"ann@acme.test", "junk"}}},
		{"/v1/email/verify/stream", map[string]any{"emails": []string{"ann@acme.test"}}},
	} {
		start := time.Now()
		r := b.call(http.MethodPost, c.path, key, c.body).want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s %v: 503 after %v, want within 1 s", c.path, c.body, took)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", c.path)
		}
		// Refused before admission, and still a verify response: the rate window, untouched.
		if got := r.header.Get("RateLimit-Remaining"); got != r.header.Get("RateLimit-Limit") || got == "" || r.header.Get("RateLimit-Reset") == "" {
			t.Errorf("%s: RateLimit headers %v, want the whole window left", c.path, r.header)
		}
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d jobs stored while they could not be queued", n)
	}
	assertUsage(t, b, acct, 0)
	// Decided locally: no fleet needed.
	b.verify(key, map[string]string{"email": "junk"}).want(t, 200, "")

	b.natsProxy.Restore()
	wait.For(t, 15*time.Second, "the API to reconnect", b.srv.dispatch.Up)
	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, 200, "")
}

// A NATS server that restarts with an empty store loses the memory stream of batch items and
// every consumer. The API's dispatcher and the worker's consumers re-create them by themselves,
// and batches work again without restarting anything.
func TestRecoversAfterNATSRestartsWithEmptyStore(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	restartable := startRestartableNATS(t)
	nc, err := queue.Connect(restartable.url, "api-restart", queue.Auth{}, b.srv.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A second API server on the restartable NATS, sharing the bundle's database.
	srv := newServerOn(t, b, nc)
	ready := startVerifierOn(t, b, restartable.url)
	_, key := b.customer(plan.Free)
	batch := map[string]any{"emails": []string{"ann@acme.test", "nobody@acme.test"}}
	callHandler(t, srv.Handler(), http.MethodPost, "/v1/email/verify/batch", key, batch).want(t, 200, "")

	restartable.restartEmpty(t)

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := callHandler(t, srv.Handler(), http.MethodPost, "/v1/email/verify/batch", key, batch)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batches still fail 30 s after the restart: %d %s", r.status, r.raw)
		}
		time.Sleep(250 * time.Millisecond)
	}
	wait.For(t, 15*time.Second, "the worker to be ready again", func() bool {
		rep, ok := ready.Run(context.Background())
		if !ok {
			t.Logf("worker readiness: %+v", rep)
		}
		return ok
	})
}

// restartableNATS is an embedded NATS server on a fixed loopback port, so that it can be
// restarted (with an empty store) under clients that keep reconnecting to the same URL.
type restartableNATS struct {
	port int
	url  string
	srv  *server.Server
}

func startRestartableNATS(t *testing.T) *restartableNATS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &restartableNATS{port: port, url: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	r.start(t)
	t.Cleanup(func() {
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *restartableNATS) start(t *testing.T) {
	t.Helper()
	s, err := queue.StartEmbedded(queue.EmbeddedOptions{StoreDir: t.TempDir(), Port: r.port})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = s
}

// restartEmpty stops the server and starts a new one on the same port with an empty store.
func (r *restartableNATS) restartEmpty(t *testing.T) {
	t.Helper()
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	r.start(t)
}

// newServerOn is an API server like b's (same database, configuration and engine) on nc.
func newServerOn(t *testing.T, b *verifyBundle, nc *nats.Conn) *Server {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "test"), Pool: b.pool, NATS: nc, JS: js,
		Ready: health.NewChecker(0), Local: b.engine})
	t.Cleanup(srv.Close)
	return srv
}

// startVerifierOn runs a verifier worker against url with production connection options and
// returns its readiness checks, once they pass.
func startVerifierOn(t *testing.T, b *verifyBundle, url string) *health.Checker {
	t.Helper()
	nc, err := queue.Connect(url, "worker-under-test", queue.Auth{}, app.NewLogger(io.Discard, "worker"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ready := health.NewChecker(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range verifyworker.Services(verifyworker.Deps{Pool: b.pool, NATS: nc, JS: js, Pipe: b.engine,
		Log: app.NewLogger(io.Discard, "worker"), Ready: ready}) {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })
	wait.For(t, 15*time.Second, "the worker to be ready", func() bool { _, ok := ready.Run(context.Background()); return ok })
	return ready
}

// A stream still running when the server begins to shut down ends within the grace with its
// error line, instead of being cut off and looking complete.
func TestStreamEndsWithErrorLineOnShutdown(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	if _, err := b.mail.AddServer(mailsim.ServerOptions{Name: "mx.glacial.test"}); err != nil {
		t.Fatal(err)
	}
	b.mail.AddDomain("glacial.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.glacial.test"}}, Users: []string{"sue"}, RcptDelay: 5 * time.Second})
	acct, key := b.customer(plan.Free)
	emails := []string{"ann@acme.test", "sue@glacial.test", "bob@acme.test"}
	var shutdownAt time.Time
	lines, raw := streamLines(t, b, key, emails, func() {
		shutdownAt = time.Now()
		b.srv.BeginShutdown()
	})
	if took := time.Since(shutdownAt); took > verification.StopGrace+2*time.Second {
		t.Errorf("the stream ended %v after the shutdown began", took)
	}
	last := lines[len(lines)-1]
	if last["error"] != CodeServiceUnavailable || !strings.Contains(last["message"].(string), "shutting down") {
		t.Fatalf("last line %s is not the shutdown's error line", raw[len(raw)-1])
	}
	assertSchema(t, loadSpecSchema(t, "StreamError"), raw[len(raw)-1], "stream error line")
	if got := last["emails"].([]any); len(got) != 1 || got[0] != "sue@glacial.test" {
		t.Errorf("not verified: %v, want [sue@glacial.test]", got)
	}
	assertUsage(t, b, acct, len(lines)-1)
}
