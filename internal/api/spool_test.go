package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
)

// stalledUpload starts a list upload whose file stops after its first rows, as a slow client's
// does, and returns the connection (the rest of the file is sent with finishUpload).
func stalledUpload(t *testing.T, addr, key string) net.Conn {
	t.Helper()
	return stalledUploadFrom(t, addr, key, "")
}

// stalledUploadFrom is stalledUpload from the client address from, as a trusted proxy in front
// would name it (X-Forwarded-For); "" sends no such header.
func stalledUploadFrom(t *testing.T, addr, key, from string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	xff := ""
	if from != "" {
		xff = "X-Forwarded-For: " + from + "\r\n"
	}
	rows := "email\nann@acme.test\n"
	_, err = fmt.Fprintf(conn, "POST /v1/email/lists HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n%s"+
		"Content-Type: text/csv\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", key, xff, len(rows), rows)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// finishUpload sends the rest of a stalled upload's file and returns the answer's status.
func finishUpload(t *testing.T, conn net.Conn) int {
	t.Helper()
	rest := "bob@acme.test\n"
	if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(rest), rest); err != nil {
		t.Fatal(err)
	}
	resp, _, _ := rawAnswer(t, conn, 20*time.Second)
	return resp.StatusCode
}

// rawAnswer reads the answer on conn within the given time: the response (body read), its body,
// and the body as an error envelope (nil if it is not one).
func rawAnswer(t *testing.T, conn net.Conn, within time.Duration) (*http.Response, []byte, map[string]any) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", within, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var env map[string]any
	_ = json.Unmarshal(raw, &env)
	return resp, raw, env
}

// Uploads whose files arrive slowly hold no database connection: more of them than the pool has
// connections leave every other route working, and each is stored once its file is complete. What
// they can hold instead is bounded: two uploads on their way per account, eight per replica, and
// the next is a 503 at once, without reading its file.
func TestSlowUploadsHoldNoDatabaseConnection(t *testing.T) {
	t.Parallel()
	// Every upload here comes from one address, which is not what this test bounds.
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_UPLOAD_SLOTS_PER_ADDRESS": "8"}})
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	addr := ts.Listener.Addr().String()

	n := int(b.pool.Config().MaxConns) + 1 // one more than the pool could hold
	if n+maxUploadsPerAccount > maxUploads {
		t.Skipf("a pool of %d connections: more stalled uploads than a replica takes", n-1)
	}
	var keys []string
	for range (n + 2 + maxUploadsPerAccount - 1) / maxUploadsPerAccount { // and one account more
		a, _ := b.account(plan.Scale, "")
		keys = append(keys, b.standardKey(a.ID).Raw)
	}
	var stalled []net.Conn
	for i := range n {
		stalled = append(stalled, stalledUpload(t, addr, keys[i/maxUploadsPerAccount]))
	}
	receiving := b.srv.verify.Receiving
	for deadline := time.Now().Add(10 * time.Second); receiving() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d uploads on their way, want %d", receiving(), n)
		}
	}

	// Every other route still works: a verification needs the pool for its usage row.
	other := keys[len(keys)-1]
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/email/verify", strings.NewReader(`{"email":"ann@acme.test"}`))
	req.Header.Set("Authorization", "Bearer "+other)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("verify while %d uploads stall: %d %s (after %v)", n, resp.StatusCode, raw, time.Since(start))
	}

	// The account whose two uploads stall gets no third, and is told why at once.
	third := stalledUpload(t, addr, keys[0])
	resp, raw, env := rawAnswer(t, third, 5*time.Second)
	third.Close() // now: the server would drain its unsent file until the idle deadline
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		env["error"] != CodeServiceUnavailable || !bytes.Contains(raw, []byte("as many uploads on their way")) {
		t.Errorf("a third upload of one account: %d %v %s", resp.StatusCode, resp.Header, raw)
	}

	// The stalled uploads are stored once their files are complete.
	for i, conn := range stalled {
		if status := finishUpload(t, conn); status != http.StatusAccepted {
			t.Errorf("upload %d: %d, want 202", i, status)
		}
	}
	if got := b.count(`SELECT count(*) FROM lists`); got != n {
		t.Errorf("%d lists stored, want %d", got, n)
	}
	if receiving() != 0 {
		t.Errorf("%d upload slots still taken", receiving())
	}
}

// An upload must arrive within the receive budget however steadily its bytes trickle in.
func TestUploadReceiveBudget(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	b.srv.uploadReceive = 700 * time.Millisecond
	b.srv.uploadIdle = 300 * time.Millisecond
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	a, _ := b.account(plan.Scale, "")
	conn := stalledUpload(t, ts.Listener.Addr().String(), b.standardKey(a.ID).Raw)
	answered := make(chan *http.Response, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			answered <- resp
		}
		close(answered)
	}()
	start := time.Now()
	// One row every 100 ms, well inside the idle deadline, for up to 5 s.
	var (
		resp *http.Response
		ok   bool
	)
	for i := 0; i < 50 && resp == nil; i++ {
		row := fmt.Sprintf("user%d@acme.test\n", i)
		if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(row), row); err != nil {
			break
		}
		select {
		case resp, ok = <-answered:
			if !ok {
				t.Fatal("the connection ended without an answer")
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if resp == nil {
		if resp, ok = <-answered; !ok {
			t.Fatal("no answer")
		}
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || took > 3*time.Second {
		t.Errorf("a trickling upload: %d after %v, want 408 after about 700 ms", resp.StatusCode, took)
	}
	if got := b.count(`SELECT count(*) FROM lists`); got != 0 {
		t.Errorf("%d lists stored", got)
	}
}

// A file whose chunked encoding is broken is the client's problem: a 400 naming it, nothing stored.
func TestUploadWithBrokenChunkedBody(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	a, _ := b.account(plan.Scale, "")
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/email/lists HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nann@a\r\nzz\r\n", b.standardKey(a.ID).Raw)
	if err != nil {
		t.Fatal(err)
	}
	resp, raw, env := rawAnswer(t, conn, 10*time.Second)
	if resp.StatusCode != http.StatusBadRequest || env["error"] != CodeInvalidRequest || !strings.Contains(fmt.Sprint(env["message"]), "could not be read") {
		t.Errorf("broken chunked upload: %d %s", resp.StatusCode, raw)
	}
	if got := b.count(`SELECT count(*) FROM lists`); got != 0 {
		t.Errorf("%d lists stored", got)
	}
}

// safeBuffer is a log destination the server writes to while the test reads it.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Issue 31's finding 6: uploads trickling slowly from several free accounts cannot keep another
// customer's upload out. The free tier holds at most 4 of the replica's 8 slots and one address
// at most 2, so a paying customer's upload is accepted while they trickle; a refusal for want of a
// slot logs who holds them; and an upload slower than the minimum rate is cut, which gives its
// slot back, so a free customer's upload is accepted too (docs/lists.md, "Limits").
func TestUploadSlotsCannotBeStarved(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, env: map[string]string{"MAILVET_TRUSTED_PROXIES": "127.0.0.0/8"}})
	logs := &safeBuffer{}
	b.srv.log = slog.New(slog.NewTextHandler(logs, nil))
	b.srv.uploadRateGrace = 2 * time.Second // the minimum rate (8 KiB/s) applies after 2 s, not 30 s
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	addr := ts.Listener.Addr().String()
	key := func(tier plan.Tier) string {
		a, _ := b.account(tier, "")
		return b.standardKey(a.ID).Raw
	}
	receiving := b.srv.verify.Receiving
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); receiving() != n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d uploads on their way, want %d", receiving(), n)
			}
		}
	}
	refused := func(conn net.Conn, says string) {
		t.Helper()
		resp, raw, env := rawAnswer(t, conn, 5*time.Second)
		conn.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || env["error"] != CodeServiceUnavailable || !bytes.Contains(raw, []byte(says)) {
			t.Errorf("want a 503 saying %q: %d %s", says, resp.StatusCode, raw)
		}
	}

	// Four free accounts, two uploads each, each from its own address: four are received (the
	// free tier's share), the others are refused at once, and the log names who holds the slots.
	var trickling []net.Conn
	for i := range 4 {
		k := key(plan.Free)
		for j := range 2 {
			from := fmt.Sprintf("198.51.100.%d", 10*i+j+1)
			conn := stalledUploadFrom(t, addr, k, from)
			if i < 2 {
				trickling = append(trickling, conn)
				waitFor(len(trickling))
				continue
			}
			refused(conn, "uploads of free accounts")
		}
	}
	if log := logs.String(); !strings.Contains(log, "upload refused: no upload slot") || !strings.Contains(log, "address=198.51.100.1 free=true") {
		t.Errorf("no log line naming the holders:\n%s", log)
	}
	// One address holds at most two slots, whatever the accounts.
	paid := key(plan.Builder)
	var fromOne []net.Conn
	for range 2 {
		fromOne = append(fromOne, stalledUploadFrom(t, addr, key(plan.Builder), "203.0.113.9"))
		waitFor(4 + len(fromOne))
	}
	refused(stalledUploadFrom(t, addr, paid, "203.0.113.9"), "your network address")
	for _, c := range fromOne {
		c.Close()
	}
	waitFor(4)

	// Another customer's upload is accepted while the free uploads trickle.
	r := b.upload(paid, "text/csv", "", "email\nann@acme.test\n").want(t, http.StatusAccepted, "")
	if r.body["id"] == nil {
		t.Fatalf("upload while others trickle: %v", r.body)
	}

	// The trickling uploads fall under the minimum rate and are cut with a 408: their slots come
	// back, and a free customer's upload is accepted.
	for _, conn := range trickling {
		resp, raw, _ := rawAnswer(t, conn, 10*time.Second)
		if resp.StatusCode != http.StatusRequestTimeout || !bytes.Contains(raw, []byte("slower than 8192 bytes a second")) {
			t.Errorf("a trickling upload: %d %s", resp.StatusCode, raw)
		}
	}
	waitFor(0)
	b.upload(key(plan.Free), "text/csv", "", "email\nbob@acme.test\n").want(t, http.StatusAccepted, "")
}
