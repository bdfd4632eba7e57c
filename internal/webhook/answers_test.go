package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A receiver that redirects, to a second receiver on loopback or to an address the guard
// refuses, gets one request and no more: the redirect is not followed (docs/api.md, "Retries"),
// so no target is ever dialled, the delivery fails at once, and last_error names the status and
// where the receiver pointed, as the receiver sent it but without control characters.
func TestRedirectIsNotFollowedAndNamed(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, statuses(200))
	tests := []struct {
		name, location, want string
		status               int
	}{
		{"to another receiver", target.url("/moved"), target.url("/moved"), http.StatusMovedPermanently},
		{"to the metadata service", "http://169.254.169.254/latest/meta-data/", "http://169.254.169.254/latest/meta-data/", http.StatusFound},
		{"to loopback", strings.Replace(target.url("/x"), testHost, "127.0.0.1", 1), strings.Replace(target.url("/x"), testHost, "127.0.0.1", 1), http.StatusTemporaryRedirect},
		{"relative, with a bidi control", "/new\u202Egnp.exe", "/newgnp.exe", http.StatusPermanentRedirect},
		{"very long", "https://hooks.example.com/" + strings.Repeat("a", 1000), "https://hooks.example.com/" + strings.Repeat("a", maxLocationText-len("https://hooks.example.com/")) + "…", http.StatusFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Location", tt.location)
				w.WriteHeader(tt.status)
			})
			b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
			id := b.create(t, b.accountID, rc.url("/cb"), "whsec_12345678", sampleBody, true)
			r := b.waitFinal(t, id, 15*time.Second)
			if r.state != StateFailed || r.attempts != 1 || itoa(r.lastStatus) != itoa(&tt.status) {
				t.Fatalf("delivery %+v, want failed after one attempt with %d", r, tt.status)
			}
			var lastError string
			if err := b.pool.QueryRow(context.Background(), `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&lastError); err != nil {
				t.Fatal(err)
			}
			want := "HTTP " + itoa(&tt.status) + " to " + tt.want + " (redirects are not followed)"
			if lastError != want {
				t.Errorf("last_error = %q, want %q", lastError, want)
			}
			if n := rc.count.Load(); n != 1 {
				t.Errorf("receiver got %d requests, want 1", n)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	if n := target.count.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests; redirects must not be followed", n)
	}
}

// 429 and 503 answers are retried, and their Retry-After is honoured when it asks for more than
// the schedule would wait (docs/api.md, "Retries"). The gap is measured at the receiver.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status     int
		retryAfter string
		min        time.Duration
	}{
		{http.StatusServiceUnavailable, "3", 3 * time.Second},
		{http.StatusTooManyRequests, "2", 2 * time.Second},
		// An HTTP date, 3 s ahead; whole seconds, so at least 2 s remain.
		{http.StatusTooManyRequests, "", 2 * time.Second},
	} {
		t.Run(itoa(&tt.status)+"/"+tt.retryAfter, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n > 1 {
					w.WriteHeader(200)
					return
				}
				ra := tt.retryAfter
				if ra == "" {
					ra = time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
				}
				w.Header().Set("Retry-After", ra)
				w.WriteHeader(tt.status)
			})
			b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
			id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
			r := b.waitFinal(t, id, 20*time.Second)
			if r.state != StateDelivered || r.attempts != 2 {
				t.Fatalf("delivery %s after %d attempts, want delivered after 2", r.state, r.attempts)
			}
			hits := rc.snapshot()
			if gap := hits[1].at.Sub(hits[0].at); gap < tt.min || gap > tt.min+1600*time.Millisecond {
				t.Errorf("gap %s after Retry-After %q, want %s to %s", gap, tt.retryAfter, tt.min, tt.min+1600*time.Millisecond)
			}
		})
	}
}

// Retry-After is read as seconds or an HTTP date; it never shortens the schedule's wait and never
// lengthens it past the schedule's longest (docs/api.md, "Retries").
func TestRetryAfterBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"7", 7 * time.Second},
		{" 12 ", 12 * time.Second},
		{"3600", MaxBackoff},
		{"99999999999999999999", MaxBackoff},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second},
		{now.Add(time.Hour).Format(http.TimeFormat), MaxBackoff},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tt.header, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.header, got, tt.want)
		}
	}
}

// A response body is stored, and listed, as text that is safe to show: valid UTF-8, no control
// characters but line feeds and tabs, no bidirectional controls (docs/api.md, "Retries").
func TestResponseBodyIsMadeSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw := "error\r\n\x1b[2J\x1b]0;owned\x07\tline 2\x00\x7f\u0085 \u202Eevil\u2066 \xff end"
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(400)
		_, _ = w.Write([]byte(raw))
	})
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateFailed {
		t.Fatalf("delivery %+v, want failed", r)
	}
	const want = "error\n[2J]0;owned\tline 2 evil \uFFFD end"
	as := b.attempts(t, id)
	if len(as) != 1 || as[0].body == nil || *as[0].body != want {
		t.Fatalf("stored response body %q, want %q", derefStr(as[0].body), want)
	}
	page, err := ListDeliveries(context.Background(), b.pool, b.accountID, ListFilter{})
	if err != nil || len(page.Deliveries) != 1 || len(page.Deliveries[0].Log) != 1 {
		t.Fatalf("ListDeliveries = %+v, %v", page, err)
	}
	if got := derefStr(page.Deliveries[0].Log[0].ResponseBody); got != want {
		t.Errorf("listed response body %q, want %q", got, want)
	}
}

func derefStr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// A receiver that trickles its body, a byte every 50 ms, is cut off by the attempt's one
// deadline (1 s here), which the bytes do not extend: were it reset per byte, the attempt would
// last as long as the receiver's loop, about 100 s. A receiver that streams without end has its
// first 4 KiB kept and the rest left unread, long before the deadline (5 s here). Both answered
// 200 before the body, so both deliveries are delivered.
func TestEndlessBodiesAreBounded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		every    time.Duration
		timeout  time.Duration
		min, max time.Duration
	}{
		{"trickle", 50 * time.Millisecond, time.Second, 900 * time.Millisecond, 2500 * time.Millisecond},
		{"flood", 0, 5 * time.Second, 0, 2500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				chunk := []byte("x")
				if tt.every == 0 {
					chunk = []byte(strings.Repeat("y", 32<<10))
				}
				// Bounded: stops when the worker goes away, or after about 100 s or 64 MiB.
				for i := 0; i < 2048; i++ {
					if _, err := w.Write(chunk); err != nil || r.Context().Err() != nil {
						return
					}
					w.(http.Flusher).Flush()
					if tt.every > 0 {
						select {
						case <-time.After(tt.every):
						case <-r.Context().Done():
							return
						}
					}
				}
			})
			b.startWorker(t, Options{AttemptTimeout: tt.timeout, AckWait: tt.timeout + 3*time.Second, Client: ClientOptions{AllowPrivate: true}})
			start := time.Now()
			id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
			r := b.waitFinal(t, id, 10*time.Second)
			if r.state != StateDelivered || r.attempts != 1 {
				t.Fatalf("delivery %+v, want delivered after 1 attempt", r)
			}
			var ms int
			if err := b.pool.QueryRow(context.Background(), `SELECT duration_ms FROM delivery_attempts WHERE delivery_id = $1`, id).Scan(&ms); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(ms) * time.Millisecond; d < tt.min || d > tt.max {
				t.Errorf("attempt took %s, want %s to %s (whole run %s)", d, tt.min, tt.max, time.Since(start))
			}
			as := b.attempts(t, id)
			if body := derefStr(as[0].body); len(body) > MaxStoredResponse || tt.every == 0 && len(body) != MaxStoredResponse {
				t.Errorf("stored %d bytes of the body, want at most %d", len(body), MaxStoredResponse)
			}
		})
	}
}

// A worker whose attempt outlives its lease while it is still alive (paused, or starved of CPU)
// may find that another worker has claimed the next attempt. If the slow attempt got a 2xx, the
// delivery is delivered whatever the later attempt answers: the receiver has the callback.
func TestLateSuccessAfterLeaseExpiryWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived1, release1 := make(chan struct{}), make(chan struct{})
	arrived2, release2 := make(chan struct{}), make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 1:
			close(arrived1)
			<-release1
			w.WriteHeader(200)
		case 2:
			close(arrived2)
			<-release2
			w.WriteHeader(http.StatusGone)
		default:
			w.WriteHeader(500)
		}
	})
	t.Cleanup(func() {
		select {
		case <-release1:
		default:
			close(release1)
		}
		select {
		case <-release2:
		default:
			close(release2)
		}
	})
	o := Options{AttemptTimeout: 5 * time.Second, AckWait: 10 * time.Second, Client: ClientOptions{AllowPrivate: true}}
	b.startWorker(t, o)
	b.startWorker(t, o)
	id := b.create(t, b.accountID, rc.url("/cb"), "whsec_12345678", sampleBody, true)
	waitChan(t, arrived1, "attempt 1")
	// Attempt 1's lease runs out while its worker still waits for the answer, and a second
	// message (a redelivery, or the sweep) reaches a worker.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET next_attempt_at = now() WHERE id = $1`, id)
	if err := publish(context.Background(), b.js, queue.Layout{}, id, id.String()+".again"); err != nil {
		t.Fatal(err)
	}
	waitChan(t, arrived2, "attempt 2")
	close(release1)
	wait.For(t, 10*time.Second, "attempt 1 recorded", func() bool {
		as := b.attempts(t, id)
		return len(as) == 2 && itoa(as[0].status) == "200"
	})
	close(release2)
	wait.For(t, 10*time.Second, "attempt 2 recorded", func() bool {
		as := b.attempts(t, id)
		return len(as) == 2 && itoa(as[1].status) == "410"
	})
	if r := b.row(t, id); r.state != StateDelivered || r.attempts != 2 || itoa(r.lastStatus) != "200" {
		t.Errorf("delivery %+v, want delivered with the 200 of attempt 1", r)
	}
	if n := rc.count.Load(); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s never arrived", what)
	}
}

// A redirect's Location is named in the delivery log but not in the worker's log line: a receiver
// that adds a trailing slash repeats the callback URL, token and all.
func TestRedirectLocationNotLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logtest.Buffer{}
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", r.URL.Path+"/?"+r.URL.RawQuery)
		w.WriteHeader(http.StatusMovedPermanently)
	})
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}, Log: app.NewLogger(logs, "test")})
	id := b.create(t, b.accountID, rc.url("/cb?token=leakedT0ken"), "whsec_12345678", sampleBody, true)
	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateFailed {
		t.Fatalf("delivery %+v, want failed", r)
	}
	var lastError string
	if err := b.pool.QueryRow(context.Background(), `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if want := "HTTP 301 to /cb/?token=leakedT0ken (redirects are not followed)"; lastError != want {
		t.Errorf("last_error = %q, want %q", lastError, want)
	}
	wait.For(t, 5*time.Second, "the failure's log line", func() bool { return strings.Contains(logs.String(), "webhook delivery failed") })
	if out := logs.String(); strings.Contains(out, "leakedT0ken") || !strings.Contains(out, "HTTP 301 (redirects are not followed)") {
		t.Errorf("the log names the Location's token, or not the redirect:\n%s", out)
	}
}
