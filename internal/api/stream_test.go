package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// smallSendBuffers gives the server's side of each connection a small socket send buffer, so that
// a client that stops reading fills the TCP path within a few dozen lines, as on a real network
// with a client that is stuck, instead of after megabytes of loopback buffering.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// streamServer serves b's API over real TCP with small send buffers; ended is closed when the
// handler of the first request to path (the stream route when "") has returned.
func streamServer(t *testing.T, b *verifyBundle, path ...string) (ts *httptest.Server, ended chan struct{}) {
	t.Helper()
	ended = make(chan struct{})
	h := b.srv.Handler()
	watch := "/v1/email/verify/stream"
	if len(path) > 0 {
		watch = path[0]
	}
	var once bool
	ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == watch && !once {
			once = true
			close(ended)
		}
	}))
	ts.Listener = smallSendBuffers{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, ended
}

// openStream sends a stream request on a raw connection whose receive buffer is small, and
// returns the connection and its response, whose body is not read yet. rcvbuf is the socket's
// receive buffer size.
func openStream(t *testing.T, ts *httptest.Server, key string, emails []string, rcvbuf int) (net.Conn, *http.Response) {
	t.Helper()
	return openPost(t, ts, "/v1/email/verify/stream", key, emails, rcvbuf)
}

// openPost is openStream for any route that takes emails.
func openPost(t *testing.T, ts *httptest.Server, path, key string, emails []string, rcvbuf int) (net.Conn, *http.Response) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
	}}
	conn, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body, _ := json.Marshal(map[string]any{"emails": emails})
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: mailvet\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", path, resp.StatusCode)
	}
	return conn, resp
}

// readLines reads the complete lines of r until it ends, waiting pause before each read of a
// few bytes (0: no pause); err is why it ended (nil: the response ended properly).
func readLines(r io.Reader, chunk int, pause time.Duration) (lines []map[string]any, err error) {
	var buf []byte
	p := make([]byte, chunk)
	for {
		if pause > 0 {
			time.Sleep(pause)
		}
		n, rerr := r.Read(p)
		buf = append(buf, p[:n]...)
		for {
			i := strings.IndexByte(string(buf), '\n')
			if i < 0 {
				break
			}
			var m map[string]any
			if json.Unmarshal(buf[:i], &m) == nil {
				lines = append(lines, m)
			}
			buf = buf[i+1:]
		}
		if rerr == io.EOF {
			return lines, nil
		}
		if rerr != nil {
			return lines, rerr
		}
	}
}

// streamEmails is n addresses: most decided by the API at once (disposable, billable), every
// fourth one by the worker fleet.
func streamEmails(n int) []string { return everyNth(n, 4, "ann+%d@acme.test", "u%d@mailinator.com") }

// everyNth is n addresses, the i-th made from the format nth when i%k == k-1, from other
// otherwise.
func everyNth(n, k int, nth, other string) []string {
	emails := make([]string, n)
	for i := range emails {
		if i%k == k-1 {
			emails[i] = fmt.Sprintf(nth, i)
		} else {
			emails[i] = fmt.Sprintf(other, i)
		}
	}
	return emails
}

// A client that stops reading a stream, its TCP window full, does not hold the stream open: once
// a line has waited writeStall to be taken, the server gives up on the client, as on one that
// went away. Only the lines that were flushed to the connection are billed (each of them reaches
// a client that reads on), the rest of the hold is given back, and the stream's subscription to
// the fleet's answers ends. The response is cut without HTTP's final chunk, so a client that reads
// on sees an incomplete transfer, never a stream that looks complete.
func TestStreamStalledReaderIsCutAndBilledOnlyForWhatWasFlushed(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	b.srv.writeStall = time.Second
	acct, key := b.customer(plan.Free)
	ts, ended := streamServer(t, b)
	// One stream first, for the subscriptions the API's NATS connection keeps once it has
	// published (JetStream's acknowledgement inbox); another account's, so that the counts below
	// are the stalled stream's alone.
	_, other := b.customer(plan.Free)
	streamLines(t, b, other, []string{"ann@acme.test"}, nil)
	subs := b.srv.nc.NumSubscriptions()

	emails := streamEmails(400)
	// The headers are read, then nothing more, as by a client stuck on something else.
	_, resp := openStream(t, ts, key, emails, 4096)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's handler is still writing to a client that stopped reading 10 s ago")
	}
	if c := b.usage(acct); c.Holds != 0 || c.Held != 0 {
		t.Errorf("counts %+v after the stream ended: its hold is still open", c)
	}
	wait.For(t, 5*time.Second, "the stream's NATS subscription to end", func() bool { return b.srv.nc.NumSubscriptions() <= subs })

	billed := b.rows(acct, usagetest.Delivered)
	lines, err := readLines(resp.Body, 4096, 0)
	if err == nil {
		t.Errorf("the cut stream ended like a complete response after %d lines", len(lines))
	}
	if len(lines) >= len(emails) || billed == 0 {
		t.Fatalf("%d lines received, %d billed of %d: the stall did not cut the stream mid-way", len(lines), billed, len(emails))
	}
	if billed > len(lines) {
		t.Errorf("%d lines billed, %d received: lines that never reached the client were billed", billed, len(lines))
	}
	if c := b.usage(acct); c.Quota != billed || c.Billable != billed {
		t.Errorf("counts %+v, want %d quota units and billable (the lines flushed)", c, billed)
	}
	t.Logf("stalled reader: %d of %d lines received, %d billed", len(lines), len(emails), billed)
}

// A client that keeps reading, however slowly, is not cut: writeStall bounds the wait for each
// line to be taken, not for a whole flush, which may carry hundreds of lines.
func TestStreamSlowReaderGetsEveryLine(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	b.srv.writeStall = 2 * time.Second
	acct, key := b.customer(plan.Free)
	ts, _ := streamServer(t, b)
	emails := streamEmails(80)
	_, resp := openStream(t, ts, key, emails, 16384)
	// About 5 KB a second: the 80 lines, which are ready at once, take some 7 s to read, every
	// one well within the stall, the whole far beyond it.
	lines, err := readLines(resp.Body, 512, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("a slow reader was cut after %d lines: %v", len(lines), err)
	}
	if len(lines) != len(emails) {
		t.Fatalf("%d lines for %d emails", len(lines), len(emails))
	}
	assertUsage(t, b, acct, len(emails))
}

// A client that trickles the stream in, taking each line within writeStall but far slower than
// the stream is verified, is cut once the stream's write time is over, so that no stream holds
// its room longer than the hold's lifetime (docs/reliability.md, "Metering guarantees").
func TestStreamTricklingReaderIsCutAtTheWriteLimit(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	b.srv.writeStall, b.srv.streamWriteLimit = time.Second, 3*time.Second
	acct, key := b.customer(plan.Free)
	ts, ended := streamServer(t, b)
	emails := streamEmails(300)
	start := time.Now()
	_, resp := openStream(t, ts, key, emails, 4096)
	done := make(chan struct{})
	var lines []map[string]any
	var err error
	go func() { defer close(done); lines, err = readLines(resp.Body, 64, 50*time.Millisecond) }()
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatal("the stream is still written to a trickling reader 15 s after it began; its write limit is 3 s")
	}
	if took := time.Since(start); took > 3*time.Second+2*time.Second {
		t.Errorf("the stream's handler ended %v after it began, want about its write limit (3 s)", took)
	}
	<-done
	if err == nil || len(lines) >= len(emails) {
		t.Errorf("%d of %d lines, then %v: want a cut stream", len(lines), len(emails), err)
	}
	billed := b.rows(acct, usagetest.Delivered)
	if billed > len(lines) {
		t.Errorf("%d billed, %d received", billed, len(lines))
	}
	if c := b.usage(acct); c.Holds != 0 || c.Held != 0 {
		t.Errorf("counts %+v: the hold is still open", c)
	}
}

// Stream lines come in completion order, and their email is the normalised address (its domain
// lowercased, the blanks around it removed), so the email cannot tell apart two inputs that
// normalise alike, nor two copies of one address. Every line names the position of the input it
// answers (index, from 0), so a client matches each answer to its input exactly.
func TestStreamLinesNameTheirInputIndex(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "1000"}})
	_, key := b.customer(plan.Free)
	emails := []string{"sue@slow.test", "Ann@ACME.test", "ann@acme.test", " ann@acme.test ", "junk", "nobody@acme.test", "ann@acme.test"}
	want := []string{"sue@slow.test", "Ann@acme.test", "ann@acme.test", "ann@acme.test", "junk", "nobody@acme.test", "ann@acme.test"}
	lines, raw := streamLines(t, b, key, emails, nil)
	if len(lines) != len(emails) {
		t.Fatalf("%d lines for %d emails", len(lines), len(emails))
	}
	seen := make([]bool, len(emails))
	for k, l := range lines {
		assertSchema(t, loadSpecSchema(t, "StreamResult"), raw[k], "stream line")
		i, ok := l["index"].(float64)
		if !ok || i != float64(int(i)) || int(i) < 0 || int(i) >= len(emails) || seen[int(i)] {
			t.Fatalf("line %d %s: index missing, out of range or repeated", k, raw[k])
		}
		seen[int(i)] = true
		if l["email"] != want[int(i)] {
			t.Errorf("line %d answers input %d (%q) with email %v", k, int(i), emails[int(i)], l["email"])
		}
	}
	if lines[len(lines)-1]["index"] != float64(0) {
		t.Errorf("the slow address (input 0) was not answered last: %s", raw[len(raw)-1])
	}
}

// The batch and stream limits of docs/api.md ("Limits") are exact: a request at each limit is
// answered whole, one past it is refused whole with 400 invalid_request before admission (no
// rate unit spent, nothing held or billed), naming the rule or the element. Duplicates are
// verified and billed once per occurrence, as documented.
func TestBatchAndStreamLimitsAreExact(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "100000"}})
	long := func(n int) string { return strings.Repeat("a", n-len("@acme.test")) + "@acme.test" }
	many := func(n int, e string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = e
		}
		return out
	}
	refused := func(path string, body any, says string) {
		t.Helper()
		acct, key := b.customer(plan.Scale)
		r := b.call(http.MethodPost, path, key, body).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, says) {
			t.Errorf("%s: message %q does not say %q", path, msg, says)
		}
		if n := b.count(`SELECT coalesce(sum(used), 0) FROM rate_windows WHERE account_id = $1`, acct); n != 0 {
			t.Errorf("%s: %d rate units spent by a refused request", path, n)
		}
		if c := b.usage(acct); c != (usagetest.Counts{}) {
			t.Errorf("%s: counts %+v for a refused request", path, c)
		}
	}

	// At the limits: 100 and 1,000 addresses, each of the longest length, in one body.
	_, key := b.customer(plan.Scale)
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": many(100, long(1024))}).want(t, 200, "")
	if n := len(r.body["results"].([]any)); n != 100 {
		t.Errorf("batch of 100: %d results", n)
	}
	if lines, _ := streamLines(t, b, key, many(1000, long(1024)), nil); len(lines) != 1000 {
		t.Errorf("stream of 1000: %d lines", len(lines))
	}

	// One past each.
	refused("/v1/email/verify/batch", map[string]any{"emails": many(101, "ann@acme.test")}, "1 to 100 addresses, not 101")
	refused("/v1/email/verify/stream", map[string]any{"emails": many(1001, "ann@acme.test")}, "1 to 1000 addresses, not 1001")
	for _, path := range []string{"/v1/email/verify/batch", "/v1/email/verify/stream"} {
		refused(path, map[string]any{"emails": []string{"ann@acme.test", long(1025)}}, "emails[1] is longer than 1024 bytes")
		refused(path, map[string]any{"emails": []any{"ann@acme.test", "bob@acme.test", 7}}, "emails[2] must be a string")
		refused(path, map[string]any{"emails": []any{"ann@acme.test", nil}}, "emails[1] must be a string")
		refused(path, "{\"emails\": [\"ann@acme.test\",\n null ,\"bob@acme.test\"]}", "emails[1] must be a string")
		refused(path, map[string]any{"emails": []string{"ann@acme.test", "  "}}, "emails[1] is empty")
		refused(path, map[string]any{"emails": []string{}}, "emails is empty")
		refused(path, `{"emails":"ann@acme.test"}`, "")
	}

	// Duplicates: one result, and one billable row, per occurrence.
	dups := []string{"ann@acme.test", "ann@acme.test", "u1@mailinator.com", "u1@mailinator.com"}
	acct, key := b.customer(plan.Scale)
	r = b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": dups}).want(t, 200, "")
	if n := len(r.body["results"].([]any)); n != len(dups) {
		t.Errorf("batch with duplicates: %d results", n)
	}
	if lines, _ := streamLines(t, b, key, dups, nil); len(lines) != len(dups) {
		t.Errorf("stream with duplicates: %d lines", len(lines))
	}
	if n, c := b.rows(acct, usagetest.Delivered), b.usage(acct); n != 2*len(dups) || c.Billable != 2*len(dups) {
		t.Errorf("%d rows, counts %+v for two requests of %d addresses each: want one billable row per occurrence", n, c, len(dups))
	}
}

// A batch whose mail servers are slow is answered well within its 30 s deadline: each probe has
// its own budget (MAILVET_SMTP_TIMEOUT), after which the address is answered unknown (timeout)
// and billed like any result, instead of the batch waiting on the server or failing whole.
func TestBatchWithSlowMailServersAnswersTheSlowAsTimeouts(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "100000"}})
	for _, d := range []string{"glacial.test", "glacial2.test"} {
		if _, err := b.mail.AddServer(mailsim.ServerOptions{Name: "mx." + d}); err != nil {
			t.Fatal(err)
		}
		b.mail.AddDomain(d, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx." + d}}, Users: []string{"sue"}, RcptDelay: time.Minute})
	}
	acct, key := b.customer(plan.Scale)
	var emails []string
	for i := range 100 {
		switch i % 3 {
		case 0:
			emails = append(emails, fmt.Sprintf("sue+%d@glacial.test", i))
		case 1:
			emails = append(emails, fmt.Sprintf("sue+%d@glacial2.test", i))
		default:
			emails = append(emails, "ann@acme.test")
		}
	}
	start := time.Now()
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}).want(t, 200, "")
	took := time.Since(start)
	for i, x := range r.body["results"].([]any) {
		res := x.(map[string]any)
		slow := strings.Contains(emails[i], "glacial")
		if slow && (res["status"] != "unknown" || res["reason"] != "timeout") {
			t.Errorf("%s: %v %v, want unknown (timeout)", emails[i], res["status"], res["reason"])
		}
		if !slow && res["status"] != "deliverable" {
			t.Errorf("%s: %v, want deliverable", emails[i], res["status"])
		}
	}
	if took > 20*time.Second {
		t.Errorf("the batch took %v; its deadline is 30 s", took)
	}
	if n, c := b.rows(acct, usagetest.Delivered), b.usage(acct); n != len(emails) || c.Billable != len(emails) {
		t.Errorf("%d rows, counts %+v: want every result billed, timeouts included", n, c)
	}
	t.Logf("batch of 100 with 67 addresses at servers that never answer RCPT: %v", took)
}

// A batch whose API loses NATS mid-way for longer than ListGrace answers 503 with Retry-After, all
// or nothing as documented: nothing billed, nothing left held.
func TestBatchCutOffFromTheFleetIs503AndBillsNothing(t *testing.T) {
	t.Parallel()
	b := setupFault(t)
	b.srv.dispatch.ListGrace = time.Second
	acct, key := b.customer(plan.Free)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for b.mail.Stats().Rcpts == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		b.natsProxy.Cut()
	}()
	t.Cleanup(func() { b.natsProxy.Restore() })
	start := time.Now()
	r := b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": faultList(40)}).
		want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("503 after %v, want about ListGrace (1 s) after the cut", took)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	assertUsage(t, b, acct, 0)
	if c := b.usage(acct); c.Holds != 0 || c.Held != 0 {
		t.Errorf("counts %+v: the batch's hold is still open", c)
	}
}

// A client that disconnects mid-stream ends the stream at once: verification stops, the lines
// its connection had taken are billed (at least those it read) and no others, its hold is given
// back and the stream's subscription to the fleet's answers ends.
func TestStreamClientGoneMidwayBillsOnlyWhatWasFlushed(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	acct, key := b.customer(plan.Free)
	ts, ended := streamServer(t, b)
	_, other := b.customer(plan.Free)
	streamLines(t, b, other, []string{"ann@acme.test"}, nil) // the connection's lasting subscriptions
	subs := b.srv.nc.NumSubscriptions()

	emails := streamEmails(400)
	conn, resp := openStream(t, ts, key, emails, 4096)
	br := bufio.NewReader(resp.Body)
	for i := range 5 {
		if _, err := br.ReadBytes('\n'); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
	}
	conn.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream's handler still runs 5 s after its client went away")
	}
	if c := b.usage(acct); c.Holds != 0 || c.Held != 0 {
		t.Errorf("counts %+v after the stream ended: its hold is still open", c)
	}
	wait.For(t, 5*time.Second, "the stream's NATS subscription to end", func() bool { return b.srv.nc.NumSubscriptions() <= subs })
	billed := b.rows(acct, usagetest.Delivered)
	if billed < 5 || billed >= len(emails) {
		t.Errorf("%d billed for a stream of %d whose client read 5 lines and left", billed, len(emails))
	}
	if c := b.usage(acct); c.Quota != billed || c.Billable != billed {
		t.Errorf("counts %+v, want %d quota units and billable (the lines flushed)", c, billed)
	}
}

// A batch whose client does not read its answer, its TCP window full, is not held open either:
// the client has writeStall to take each part of the answer, then the answer counts as not
// delivered (docs/api.md, "Limits"): nothing is billed and the hold is given back. A client that
// reads, even slowly, gets the whole answer, billed.
func TestBatchStalledReaderIsNotBilledAndReleasesItsHold(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	b.srv.writeStall = 2 * time.Second
	acct, key := b.customer(plan.Free)
	ts, ended := streamServer(t, b, "/v1/email/verify/batch")
	// The headers are in the first part written, so the response begins; then nothing is read.
	conn, _ := openPost(t, ts, "/v1/email/verify/batch", key, streamEmails(100), 4096)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch's handler is still writing to a client that stopped reading 10 s ago")
	}
	conn.Close()
	if c := b.usage(acct); c != (usagetest.Counts{}) {
		t.Errorf("counts %+v for an answer the client did not take, want nothing used, billed or held", c)
	}

	// Read slowly (about 10 KB a second), the same answer arrives whole and is billed.
	_, resp := openPost(t, ts, "/v1/email/verify/batch", key, streamEmails(100), 4096)
	var got bytes.Buffer
	p := make([]byte, 1024)
	for {
		time.Sleep(100 * time.Millisecond)
		n, err := resp.Body.Read(p)
		got.Write(p[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("a slow reader's batch was cut after %d bytes: %v", got.Len(), err)
		}
	}
	var body batchResponse
	if err := json.Unmarshal(got.Bytes(), &body); err != nil || body.Count != 100 {
		t.Fatalf("slow reader: %d bytes, %v, count %d", got.Len(), err, body.Count)
	}
	assertUsage(t, b, acct, 100)
}

// The write deadline a batch or stream leaves on its connection does not outlive the request
// (net/http clears it once the response is finished): a client that reuses its connection a
// while after a batch or stream gets its next answer, not a broken connection.
func TestWriteDeadlineDoesNotOutliveItsRequest(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "10000"}})
	b.srv.writeStall = 200 * time.Millisecond
	_, key := b.customer(plan.Free)
	ts, _ := streamServer(t, b)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	post := func(path string) (reused bool) {
		t.Helper()
		var info httptrace.GotConnInfo
		body, _ := json.Marshal(map[string]any{"emails": []string{"ann@acme.test", "u1@mailinator.com"}})
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, bytes.NewReader(body))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }}))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s (connection reused: %v): %v", path, info.Reused, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s (connection reused: %v): %d %s %v", path, info.Reused, resp.StatusCode, raw, err)
		}
		return info.Reused
	}
	post("/v1/email/verify/batch")
	time.Sleep(time.Second) // well past the deadline the batch's answer was written under
	if !post("/v1/email/verify/stream") {
		t.Fatal("the connection was not reused; the test proves nothing")
	}
	time.Sleep(time.Second)
	if !post("/v1/email/verify/batch") {
		t.Fatal("the connection was not reused; the test proves nothing")
	}
}
