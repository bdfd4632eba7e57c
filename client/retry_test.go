package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
)

// These tests time the client's retries against a local fake of the API, which can place
// reset_at and Retry-After exactly; the end-to-end tests (e2e_test.go) run against the real
// server.

const deliverable = `{"email":"ann@acme.example","valid":true,"status":"deliverable","confidence":0.95,"failed_check":null,"disposable":false,"role":false,"free_provider":false,"catch_all":false,"smtp_blocked":false,"mx_found":true,"mx_host":"mx.acme.example","suggestion":null,"latency_ms":3.5,"reason":"accepted"}`

// streamLine is deliverable as a stream's result line answering the request's i-th address.
func streamLine(i int) string { return fmt.Sprintf(`{"index":%d,`, i) + deliverable[1:] }

// fake answers the i-th request (from 0) with answer(i, r) and records when each arrived.
type fake struct {
	mu      sync.Mutex
	arrived []time.Time
	bodies  []string
	answer  func(i int, w http.ResponseWriter, r *http.Request)
}

func newFake(t *testing.T, answer func(i int, w http.ResponseWriter, r *http.Request)) (*fake, *httptest.Server) {
	f := &fake{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body strings.Builder
		if r.Body != nil {
			buf := make([]byte, 4096)
			for {
				n, err := r.Body.Read(buf)
				body.Write(buf[:n])
				if err != nil {
					break
				}
			}
		}
		f.mu.Lock()
		i := len(f.arrived)
		f.arrived = append(f.arrived, time.Now())
		f.bodies = append(f.bodies, body.String())
		f.mu.Unlock()
		answer(i, w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) requests() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.arrived...)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// writeBatch answers a batch request for emails as the API does when each is deliverable: the
// batch fakes that split or wait out a rate limit answer their chunks alike.
func writeBatch(w http.ResponseWriter, emails []string) {
	var out []string
	for _, e := range emails {
		out = append(out, strings.Replace(deliverable, "ann@acme.example", e, 1))
	}
	writeJSON(w, 200, `{"results":[`+strings.Join(out, ",")+`],"count":`+fmt.Sprint(len(out))+`}`)
}

// numbered is n distinct addresses, u00@acme.example on, in order, so that a batch's results can
// be matched to its input.
func numbered(n int) []string {
	emails := make([]string, n)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%02d@acme.example", i)
	}
	return emails
}

func rateLimited(w http.ResponseWriter, resetAt time.Time) {
	w.Header().Set("Retry-After", fmt.Sprint(max(int(time.Until(resetAt).Seconds()+0.999), 1)))
	writeJSON(w, http.StatusTooManyRequests, fmt.Sprintf(`{"error":"rate_limit_exceeded","message":"Rate limit of 10 emails per minute exceeded for this account.","action":"Wait until reset_at.","docs":"http://x/docs/errors#rate_limit_exceeded","limit":10,"window":"1m","reset_at":%q}`,
		resetAt.UTC().Format(time.RFC3339)))
}

// A 429 rate_limit_exceeded is sent again once reset_at has passed, plus 50 ms, and the caller
// sees only the result.
func TestRetryWaitsUntilResetAt(t *testing.T) {
	t.Parallel()
	// reset_at has whole seconds on the wire, as the API sends it.
	resetAt := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second)
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			rateLimited(w, resetAt)
			return
		}
		writeJSON(w, http.StatusOK, deliverable)
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	r, err := c.Verify(context.Background(), "ann@acme.example")
	if err != nil || r.Status != client.StatusDeliverable || r.MXHost != "mx.acme.example" || r.Reason != "accepted" {
		t.Fatalf("Verify = %+v, %v", r, err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if earliest := resetAt.Add(50 * time.Millisecond); reqs[1].Before(earliest) {
		t.Errorf("retry sent at %s, before reset_at + 50 ms (%s)", reqs[1].Format(time.StampMilli), earliest.Format(time.StampMilli))
	}
	if late := resetAt.Add(time.Second); reqs[1].After(late) {
		t.Errorf("retry sent at %s, long after reset_at %s", reqs[1].Format(time.StampMilli), resetAt.Format(time.StampMilli))
	}
}

// Retrying is off by default: the 429 comes back as an *Error with every field typed.
func TestRateLimitErrorIsTyped(t *testing.T) {
	t.Parallel()
	resetAt := time.Now().Add(30 * time.Second).Truncate(time.Second)
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { rateLimited(w, resetAt) })
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL))
	_, err := c.Verify(context.Background(), "ann@acme.example")
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *client.Error", err)
	}
	if e.Status != 429 || e.Code != client.CodeRateLimitExceeded || e.Limit != 10 || e.Window != "1m" || !e.ResetAt.Equal(resetAt) ||
		e.RetryAfter < 29*time.Second || e.Action == "" || !strings.HasSuffix(e.Docs, "#rate_limit_exceeded") || e.Fields["limit"] != float64(10) {
		t.Errorf("error = %+v", e)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests without retrying, want 1", n)
	}
}

// At most WithMaxRetries retries; then the last refusal is returned.
func TestRetryStopsAfterMaxRetries(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		rateLimited(w, time.Now().Add(-time.Second)) // already passed: only the 50 ms margin
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true), client.WithMaxRetries(2))
	_, err := c.VerifyBatch(context.Background(), []string{"a@acme.example", "b@acme.example"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeRateLimitExceeded {
		t.Fatalf("err = %v", err)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 1 + 2 retries", len(reqs))
	}
	for i := 1; i < len(reqs); i++ {
		if gap := reqs[i].Sub(reqs[i-1]); gap < 50*time.Millisecond {
			t.Errorf("retry %d after %s, want at least the 50 ms margin", i, gap)
		}
	}
	// The default is 3 retries.
	f2, srv2 := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { rateLimited(w, time.Now().Add(-time.Second)) })
	_, _ = client.New("k", client.WithBaseURL(srv2.URL), client.WithRetryOnRateLimit(true)).Verify(context.Background(), "a@b.example")
	if n := len(f2.requests()); n != 1+client.DefaultMaxRetries {
		t.Errorf("default: %d requests, want %d", n, 1+client.DefaultMaxRetries)
	}
}

// A 503 with Retry-After is retried after that many seconds; monthly_quota_exceeded, whose
// reset_at is next month, is not retried at all.
func TestRetry503AndNotMonthlyQuota(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/email/verify" && i == 0:
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 503, `{"error":"service_unavailable","message":"No verifier answered.","action":"Retry after Retry-After seconds.","docs":"d"}`)
		case r.URL.Path == "/v1/email/verify":
			writeJSON(w, 200, deliverable)
		default:
			w.Header().Set("Retry-After", "86400")
			writeJSON(w, 429, `{"error":"monthly_quota_exceeded","message":"m","action":"a","docs":"d","limit":500,"used":500,"reset_at":"2026-12-01T00:00:00Z"}`)
		}
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	if _, err := c.Verify(context.Background(), "ann@acme.example"); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 || reqs[1].Sub(reqs[0]) < time.Second {
		t.Fatalf("requests at %v, want a retry 1 s after the 503", reqs)
	}
	start := time.Now()
	_, err := c.VerifyBatch(context.Background(), []string{"a@acme.example"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeMonthlyQuotaExceeded || e.Used != 500 || e.Limit != 500 || e.RetryAfter != 24*time.Hour {
		t.Fatalf("err = %#v", err)
	}
	if len(f.requests()) != 3 || time.Since(start) > time.Second {
		t.Errorf("monthly_quota_exceeded was retried")
	}
}

// Cancelling the context ends a wait for the next window at once; a deadline that would pass
// before the retry returns the API's refusal rather than sleeping into it.
func TestRetryWaitHonoursContext(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { rateLimited(w, time.Now().Add(20*time.Second)) })
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Verify(ctx, "ann@acme.example")
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Errorf("cancelled wait: %v after %s", err, time.Since(start))
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	start = time.Now()
	_, err = c.Verify(ctx, "ann@acme.example")
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeRateLimitExceeded || time.Since(start) > 2*time.Second {
		t.Errorf("deadline before reset_at: %v after %s", err, time.Since(start))
	}
}

// WithTimeout bounds an exchange and says so; the caller's cancellation is reported as such.
func TestTimeoutAndCancellation(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := client.New("k", client.WithBaseURL(srv.URL), client.WithTimeout(150*time.Millisecond))
	start := time.Now()
	_, err := c.Account(context.Background())
	if !errors.Is(err, client.ErrTimeout) || time.Since(start) > 3*time.Second {
		t.Errorf("timeout: %v after %s", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = client.New("k", client.WithBaseURL(srv.URL)).UsageSummary(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrTimeout) {
		t.Errorf("cancelled: %v", err)
	}
}

// Answers that are not the API's envelope (a proxy's page) are still *Error, with the status.
func TestErrorWithoutEnvelope(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, "<html>bad gateway</html>")
	})
	_, err := client.New("k", client.WithBaseURL(srv.URL)).ListKeys(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 502 || e.Code != client.CodeUnexpectedResponse || !strings.Contains(e.Message, "bad gateway") {
		t.Fatalf("err = %v", err)
	}
}

// payment_required carries the spend cap, null or a number.
func TestPaymentRequiredExtras(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 402, `{"error":"payment_required","message":"m","action":"a","docs":"d","hard_cap_eur":250,"current_overage_eur":249.5,"room":125,"reset_at":"2026-12-01T00:00:00Z","future_field":"x"}`)
	})
	_, err := client.New("k", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true)).Verify(context.Background(), "a@b.example")
	var e *client.Error
	if !errors.As(err, &e) || e.HardCapEUR == nil || *e.HardCapEUR != 250 || e.CurrentOverageEUR != 249.5 || e.Room != 125 ||
		!e.ResetAt.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || e.Fields["future_field"] != "x" {
		t.Fatalf("err = %#v", err)
	}
}

// A request larger than the account's whole per-minute limit can never pass: the client goes on
// in chunks of the limit the refusal names.
func TestChunksShrinkToTheRateLimit(t *testing.T) {
	t.Parallel()
	var sizes []int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Emails []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		sizes = append(sizes, len(req.Emails))
		mu.Unlock()
		if len(req.Emails) > 10 {
			rateLimited(w, time.Now().Add(time.Minute))
			return
		}
		writeBatch(w, req.Emails)
	}))
	t.Cleanup(srv.Close)
	emails := numbered(25)
	// With retrying on too: a chunk over the whole per-minute limit can never pass, so it is not
	// sent again after reset_at (a minute here) but split at once.
	for _, retry := range []bool{false, true} {
		mu.Lock()
		sizes = nil
		mu.Unlock()
		start := time.Now()
		results, err := client.New("k", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(retry)).VerifyBatch(context.Background(), emails)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Email != emails[i] {
				t.Fatalf("result %d is %s, want %s", i, r.Email, emails[i])
			}
		}
		mu.Lock()
		got := fmt.Sprint(sizes)
		mu.Unlock()
		if got != "[25 10 10 5]" || time.Since(start) > 5*time.Second {
			t.Errorf("retrying %v: request sizes %v in %v, want [25 10 10 5] at once", retry, got, time.Since(start))
		}
	}
}

// A 503 to a management POST that creates something may come after it acted (a commit whose
// answer came too late): it is not sent again, where a read is. A Retry-After given as an HTTP
// date, as a proxy may send, is honoured.
func TestRetry503OnlyWhenRepeatable(t *testing.T) {
	t.Parallel()
	var keysMu sync.Mutex
	var keys []string
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		keysMu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		keysMu.Unlock()
		if r.Method == http.MethodGet && i > 2 {
			writeJSON(w, 200, `{"keys":[]}`)
			return
		}
		if r.URL.Path == "/v1/management/keys" && r.Method == http.MethodPost && i == 1 {
			writeJSON(w, 201, `{"id":"k1","label":"prod","prefix":"sk_live_abcd","created_at":"2026-11-23T00:00:00Z","key":"sk_live_x","warning":"w"}`)
			return
		}
		w.Header().Set("Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
		writeJSON(w, 503, `{"error":"service_unavailable","message":"The datastore could not be reached in time.","action":"Retry.","docs":"d"}`)
	})
	c := client.New("sk_mgmt_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	// A key creation carries an Idempotency-Key, the same on its retry: the API creates one key.
	if _, err := c.CreateKey(context.Background(), "prod"); err != nil {
		t.Fatalf("CreateKey, retried after the 503: %v", err)
	}
	if reqs := f.requests(); len(reqs) != 2 || reqs[1].Sub(reqs[0]) < 500*time.Millisecond {
		t.Fatalf("CreateKey sent at %v, want twice, after the Retry-After date", reqs)
	}
	if keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("Idempotency-Keys %q, want one key on both attempts", keys)
	}
	if _, err := c.ListKeys(context.Background()); err != nil {
		t.Fatalf("ListKeys, retried after the 503: %v", err)
	}
	if reqs := f.requests(); len(reqs) != 4 || reqs[3].Sub(reqs[2]) < 500*time.Millisecond {
		t.Fatalf("requests at %v, want a read retried after the Retry-After date", reqs)
	}
	if keys[2] != "" || keys[3] != "" {
		t.Fatalf("a read carried an Idempotency-Key: %q", keys)
	}
	// A delivery replay has no key: a 503 may come after it acted, so it is not sent again.
	var e *client.Error
	if _, err := c.RetryDelivery(context.Background(), "d1"); !errors.As(err, &e) || e.Status != 503 || e.RetryAfter <= 0 {
		t.Fatalf("RetryDelivery: %#v, want the 503 with its Retry-After date read", err)
	}
	if n := len(f.requests()); n != 5 {
		t.Fatalf("RetryDelivery sent %d times, want once", n-4)
	}
}

// A stream's final error line ends the iteration with an *Error that lists what was not
// verified; a stream cut short without one is an error too.
func TestStreamErrorLine(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", i))
		fmt.Fprintln(w, streamLine(0))
		if i == 0 {
			fmt.Fprintln(w, `{"error":"service_unavailable","message":"1 of 2 addresses were not verified: the fleet did not answer.","action":"Send the addresses listed in emails again; nothing was charged for them.","docs":"d","emails":["bob@initech.example"]}`)
		}
	})
	c := client.New("k", client.WithBaseURL(srv.URL))
	rs, streamErr := drain(c.VerifyStream(context.Background(), []string{"ann@acme.example", "bob@initech.example"}))
	got := emailsOf(rs)
	var e *client.Error
	if !errors.As(streamErr, &e) || e.Code != client.CodeServiceUnavailable || e.Status != 503 || fmt.Sprint(e.Emails) != "[bob@initech.example]" || fmt.Sprint(e.Indexes) != "[1]" || e.RequestID != "req-0" {
		t.Fatalf("stream error = %v (request id %q, indexes %v)", streamErr, e.RequestID, e.Indexes)
	}
	if fmt.Sprint(got) != "[ann@acme.example]" {
		t.Errorf("results %v", got)
	}
	// Second request: one line for two addresses and no error line.
	_, streamErr = drain(c.VerifyStream(context.Background(), []string{"ann@acme.example", "bob@initech.example"}))
	if streamErr == nil || !strings.Contains(streamErr.Error(), "(request id req-1): the stream ended after 1 of 2") || !errors.Is(streamErr, io.ErrUnexpectedEOF) {
		t.Errorf("truncated stream: %v; want the count, the request id and io.ErrUnexpectedEOF", streamErr)
	}
}

// A stream that ends inside a line (the API ends every line with a newline) without an error line
// drain reads a stream to its end: its results, and the last error it yielded (nil if none).
func drain(seq iter.Seq2[client.Result, error]) (results []client.Result, err error) {
	for r, e := range seq {
		if e != nil {
			err = e
			continue
		}
		results = append(results, r)
	}
	return results, err
}

// emailsOf is the Email of each result.
func emailsOf(rs []client.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Email
	}
	return out
}

// indexesOf is the Index of each result.
func indexesOf(rs []client.Result) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Index
	}
	return out
}

// is incomplete, as one that ends between lines: io.ErrUnexpectedEOF, not a JSON syntax error.
func TestStreamCutInsideALine(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Request-Id", "req-cut")
		fmt.Fprintln(w, streamLine(0))
		fmt.Fprint(w, streamLine(1)[:40])
	})
	rs, streamErr := drain(client.New("k", client.WithBaseURL(srv.URL)).VerifyStream(context.Background(), numbered(3)))
	got := emailsOf(rs)
	if len(got) != 1 || !errors.Is(streamErr, io.ErrUnexpectedEOF) || !strings.Contains(streamErr.Error(), "after 1 of 3 results") ||
		!strings.Contains(streamErr.Error(), "req-cut") {
		t.Fatalf("results %v, err %v; want one result and an incomplete stream (io.ErrUnexpectedEOF) naming the request id", got, streamErr)
	}
}

// A line whose index is missing, outside the request or answered already cannot be matched to its
// input: it ends the stream with an error instead of a result given the wrong Index.
func TestStreamLineWithoutAUsableIndex(t *testing.T) {
	t.Parallel()
	for name, second := range map[string]string{
		"missing":      deliverable,
		"repeated":     streamLine(2),
		"past the end": streamLine(3),
		"negative":     streamLine(-1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				fmt.Fprintln(w, streamLine(2))
				fmt.Fprintln(w, second)
				fmt.Fprintln(w, streamLine(0))
			})
			rs, streamErr := drain(client.New("k", client.WithBaseURL(srv.URL)).VerifyStream(context.Background(), numbered(3)))
			got := indexesOf(rs)
			if fmt.Sprint(got) != "[2]" || streamErr == nil || !strings.Contains(streamErr.Error(), "line 2: index") {
				t.Fatalf("indexes %v, err %v; want the first line's result, then an error naming line 2's index", got, streamErr)
			}
		})
	}
}

// An error line in the first of two requests owes the second request's addresses too.
func TestStreamErrorOwesLaterChunks(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, streamLine(0))
		fmt.Fprintln(w, `{"error":"service_unavailable","message":"m","action":"a","docs":"d","emails":["x"]}`)
	})
	emails := make([]string, 1002)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%04d@acme.example", i)
	}
	var last error
	for _, err := range client.New("k", client.WithBaseURL(srv.URL)).VerifyStream(context.Background(), emails) {
		last = err
	}
	var e *client.Error
	if !errors.As(last, &e) || len(e.Emails) != 3 || e.Emails[0] != "x" || e.Emails[1] != "u1000@acme.example" || e.Emails[2] != "u1001@acme.example" {
		t.Fatalf("err = %v (emails %v)", last, e)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests: the chunk after an incomplete stream was sent", n)
	}
	var req struct{ Emails []string }
	if err := json.Unmarshal([]byte(f.bodies[0]), &req); err != nil || len(req.Emails) != client.StreamChunkSize {
		t.Errorf("first request had %d addresses, want %d", len(req.Emails), client.StreamChunkSize)
	}
}

// A POST without an Idempotency-Key answered by a 503 that is not the API's envelope (a proxy's
// page) is never sent again: the proxy may have passed it on, and the API acted on it. One with a
// key is (the API runs it once), and a read is repeated whoever answered.
func TestProxy503ToAPostIsNotRepeated(t *testing.T) {
	t.Parallel()
	var keysMu sync.Mutex
	keys := map[string]int{}
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		keysMu.Lock()
		keys[r.Header.Get("Idempotency-Key")]++
		keysMu.Unlock()
		if r.Method == http.MethodGet && i == 3+client.DefaultMaxRetries { // the read's second try
			writeJSON(w, 200, `{"job_id":"j1","status":"queued","created_at":"2026-11-23T00:00:00Z"}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "<h1>upstream timed out</h1>")
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	if _, err := c.CancelList(context.Background(), "l1"); err == nil {
		t.Fatal("a proxy's 503 to a cancel passed")
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests for a POST without a key answered by a proxy's 503; want one", n)
	}
	// (The stream, the other verification without a key, is in TestBatchRequestsCarryAnIdempotencyKey.)
	// An async verification carries an Idempotency-Key: whatever the proxy did with an attempt,
	// the API runs the job once, so it is sent again, with the same key.
	_, err := c.VerifyAsync(context.Background(), "ann@acme.example", client.AsyncOptions{WebhookURL: "https://hooks.example.com/x"})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeUnexpectedResponse || e.Status != 503 {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 2+client.DefaultMaxRetries {
		t.Fatalf("%d requests; want the async verification sent %d times", n, 1+client.DefaultMaxRetries)
	}
	keysMu.Lock()
	if len(keys) != 2 || keys[""] != 1 {
		t.Fatalf("Idempotency-Keys %v, want none on the cancel and one on every async attempt", keys)
	}
	keysMu.Unlock()
	if _, err := c.Job(context.Background(), "j1"); err != nil {
		t.Fatalf("a read after a proxy's 503: %v", err)
	}
	if n := len(f.requests()); n != 4+client.DefaultMaxRetries {
		t.Fatalf("%d requests; the read should have been sent again once", n)
	}
}

// An error in the middle of VerifyBatch comes back with the results before it, and names the part
// of the input its request carried: a field the API names (emails[1]) counts from there.
func TestBatchErrorNamesThePartOfTheInput(t *testing.T) {
	t.Parallel()
	var self atomic.Pointer[fake] // the fake keeps each request's body; the handler reads it there
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		f := self.Load()
		f.mu.Lock()
		raw := f.bodies[i]
		f.mu.Unlock()
		var body struct{ Emails []string }
		_ = json.Unmarshal([]byte(raw), &body)
		results := make([]string, len(body.Emails))
		for j, e := range body.Emails {
			if e == "" {
				writeJSON(w, 400, fmt.Sprintf(`{"error":"invalid_request","message":"Field emails[%d] is empty; send an email address.","action":"a","docs":"d"}`, j))
				return
			}
			results[j] = strings.Replace(deliverable, "ann@acme.example", e, 1)
		}
		writeJSON(w, 200, `{"results":[`+strings.Join(results, ",")+`]}`)
	})
	self.Store(f)
	in := make([]string, 120)
	for i := range in {
		in[i] = fmt.Sprintf("u%d@acme.example", i)
	}
	in[101] = ""
	res, err := client.New("sk_live_test", client.WithBaseURL(srv.URL)).VerifyBatch(context.Background(), in)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeInvalidRequest || len(res) != 100 || res[99].Email != "u99@acme.example" {
		t.Fatalf("%d results, err %v", len(res), err)
	}
	if !strings.Contains(err.Error(), "emails[100:120]") {
		t.Fatalf("the error does not say which part of the input failed: %v", err)
	}
}

// VerifyBatchWith reports its progress after each request and before each wait for the rate
// limit, with when the wait ends; the first wait that leaves more than a minute's worth of the
// limit carries the hint to use a bulk list. Without a callback the hint goes to the standard
// logger, once (issue 32: a free tier's batch waited 11 minutes without a word).
func TestVerifyBatchProgress(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Emails []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		// The 3rd and 6th requests (the 2nd chunk of 10 of each call) wait for the next window.
		if len(req.Emails) > 10 || i == 3 || i == 8 {
			rateLimited(w, time.Now().Add(time.Second))
			return
		}
		writeBatch(w, req.Emails)
	}))
	t.Cleanup(srv.Close)
	emails := numbered(30)
	c := client.New("k", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	var got []client.BatchProgress
	results, err := c.VerifyBatchWith(context.Background(), emails, client.BatchOptions{Progress: func(p client.BatchProgress) { got = append(got, p) }})
	if err != nil || len(results) != 30 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	if len(got) != 4 {
		t.Fatalf("progress %+v, want 4 readings", got)
	}
	for i, want := range []struct {
		done    int
		waiting bool
	}{{10, false}, {10, true}, {20, false}, {30, false}} {
		p := got[i]
		if p.Done != want.done || p.Total != 30 || p.WaitingUntil.IsZero() == want.waiting {
			t.Errorf("reading %d: %+v, want done %d, waiting %v", i, p, want.done, want.waiting)
		}
	}
	if w := got[1]; w.RateLimit != 10 || time.Until(w.WaitingUntil) > 2*time.Second ||
		!strings.Contains(w.Hint, "20 addresses are left") || !strings.Contains(w.Hint, "about 2 minutes") || !strings.Contains(w.Hint, "UploadList") {
		t.Errorf("the wait: %+v", w)
	}
	// No callback: the hint is logged once.
	var logged strings.Builder
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	if _, err := c.VerifyBatch(context.Background(), emails); err != nil {
		t.Fatal(err)
	}
	if strings.Count(logged.String(), "bulk list") != 1 {
		t.Errorf("logged %q, want the hint once", logged.String())
	}
}

// Each request of VerifyBatch carries its own Idempotency-Key, repeated on its retry after a
// proxy's 503 (which may have passed it on: the API replays a keyed batch's first answer, so it is
// verified and charged once); a synchronous Verify carries none (the key would have the API keep
// its answer for 24 hours and cost the fastest call two Postgres round trips), nor does the stream.
func TestBatchRequestsCarryAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if i == 1 || i == 4 { // a proxy's page, before the first batch chunk and the stream
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "<h1>upstream timed out</h1>")
			return
		}
		if r.URL.Path == "/v1/email/verify" {
			writeJSON(w, 200, deliverable)
			return
		}
		if i == 2 {
			writeBatch(w, numbered(60)[:50])
			return
		}
		writeBatch(w, numbered(60)[50:])
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	if _, err := c.Verify(context.Background(), "ann@acme.example"); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if _, err := c.VerifyBatch(context.Background(), numbered(60)); err != nil {
		t.Fatalf("VerifyBatch after a proxy's 503: %v", err)
	}
	var streamErr error
	for _, err := range c.VerifyStream(context.Background(), numbered(2)) {
		streamErr = err
	}
	mu.Lock()
	defer mu.Unlock()
	// 0: Verify; 1, 2: the first chunk (50) and its retry; 3: the second (10); 4: the stream, not
	// sent again.
	if len(keys) != 5 {
		t.Fatalf("%d requests, want 5 (keys %q)", len(keys), keys)
	}
	if keys[0] != "" {
		t.Errorf("a synchronous Verify carried Idempotency-Key %q", keys[0])
	}
	for _, i := range []int{1, 3} {
		if len(keys[i]) != 32 {
			t.Errorf("request %d carried Idempotency-Key %q, want 128 random bits in hex", i, keys[i])
		}
	}
	if keys[2] != keys[1] {
		t.Errorf("the retry carried key %q, want its first attempt's %q", keys[2], keys[1])
	}
	if keys[3] == keys[1] {
		t.Errorf("keys %q: each request of a batch is its own operation and needs its own key", keys)
	}
	if keys[4] != "" || streamErr == nil {
		t.Errorf("stream: key %q, err %v; want no key and the proxy's 503", keys[4], streamErr)
	}
}

// A 409 idempotency_key_in_use says the call's first attempt is still running on the server: with
// retrying on, the same key is sent again after Retry-After and gets that attempt's answer.
func TestIdempotencyKeyInUseIsRetried(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if i == 0 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusConflict, `{"error":"idempotency_key_in_use","message":"A request with this Idempotency-Key is still running.","action":"Retry with the same key after the seconds in Retry-After.","docs":"d"}`)
			return
		}
		writeJSON(w, 201, `{"id":"k1","label":"prod","prefix":"sk_live_abcd","created_at":"2026-11-23T00:00:00Z","key":"sk_live_x","warning":"w"}`)
	})
	c := client.New("sk_mgmt_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	k, err := c.CreateKey(context.Background(), "prod")
	if err != nil || k.Key != "sk_live_x" {
		t.Fatalf("CreateKey = %+v, %v; want the first attempt's key after the 409", k, err)
	}
	reqs := f.requests()
	if len(reqs) != 2 || reqs[1].Sub(reqs[0]) < time.Second {
		t.Fatalf("requests at %v, want a retry after Retry-After (1 s)", reqs)
	}
	mu.Lock()
	defer mu.Unlock()
	if keys[0] == "" || keys[1] != keys[0] {
		t.Fatalf("keys %q, want the same key on the retry", keys)
	}
}

// A Retry-After longer than MaxRetryWait (a proxy's hour) is not waited out in silence: the error
// comes back at once, its RetryAfter saying when to try again, even without a context deadline.
func TestLongRetryAfterIsReturnedNotWaited(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		writeJSON(w, 503, `{"error":"service_unavailable","message":"Down for maintenance.","action":"Retry later.","docs":"d"}`)
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	ctx, cancel := context.WithCancel(context.Background()) // no deadline: the client's own bound must act
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Job(ctx, "j1"); done <- err }()
	select {
	case err := <-done:
		var e *client.Error
		if !errors.As(err, &e) || e.Status != 503 || e.RetryAfter != time.Hour {
			t.Fatalf("err = %v, want the 503 with its Retry-After of an hour", err)
		}
	case <-time.After(3 * time.Second):
		cancel()
		t.Fatal("the client was still waiting after 3 s to retry a Retry-After of an hour")
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// A Retry-After too large for a time.Duration (a proxy's, not the API's) is a wait beyond
// MaxRetryWait like any other long one: returned at once with its RetryAfter, never wrapped
// around into a negative or a short wait that would be retried in a tight loop.
func TestHugeRetryAfterIsNotWrappedAround(t *testing.T) {
	t.Parallel()
	for _, header := range []string{
		"18446744074",          // seconds × 1e9 wraps past 2^64 to 0.29 s
		"10000000000",          // wraps to a negative duration
		"99999999999999999999", // beyond int64 itself
	} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", header)
				writeJSON(w, 503, `{"error":"service_unavailable","message":"Down for maintenance.","action":"Retry later.","docs":"d"}`)
			})
			c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
			_, err := c.Job(context.Background(), "j1")
			var e *client.Error
			if !errors.As(err, &e) || e.Status != 503 || e.RetryAfter <= client.MaxRetryWait {
				t.Fatalf("err = %v, want the 503 with a RetryAfter beyond MaxRetryWait", err)
			}
			if n := len(f.requests()); n != 1 {
				t.Fatalf("%d requests, want 1: a Retry-After beyond MaxRetryWait is not waited", n)
			}
		})
	}
	// A reset_at so far off that the wait until it is the largest Duration: the same.
	t.Run("reset_at", func(t *testing.T) {
		t.Parallel()
		f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
			rateLimited(w, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
		})
		c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
		_, err := c.Verify(context.Background(), "ann@acme.example")
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeRateLimitExceeded || e.ResetAt.Year() != 9999 {
			t.Fatalf("err = %v, want the 429 with its reset_at", err)
		}
		if n := len(f.requests()); n != 1 {
			t.Fatalf("%d requests, want 1: a reset_at beyond MaxRetryWait is not waited", n)
		}
	})
}

// Clients refused together do not all come back in the same millisecond: every wait before a
// retry gets a random jitter (up to a tenth of it), after Retry-After + 50 ms, never before.
func TestRetriesAreJittered(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	first := map[string]time.Time{}
	var retries []time.Duration
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		id := r.URL.Path
		mu.Lock()
		t0, seen := first[id]
		if !seen {
			first[id] = time.Now()
		} else {
			retries = append(retries, time.Since(t0))
		}
		mu.Unlock()
		if !seen {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 503, `{"error":"service_unavailable","message":"m","action":"a","docs":"d"}`)
			return
		}
		writeJSON(w, 200, `{"job_id":"j","status":"queued","created_at":"2026-11-23T00:00:00Z"}`)
	})
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if _, err := c.Job(context.Background(), fmt.Sprint("j", i)); err != nil {
				t.Errorf("Job: %v", err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(retries) != 16 {
		t.Fatalf("%d retries, want 16", len(retries))
	}
	slices.Sort(retries)
	lo, median, hi := retries[0], retries[len(retries)/2], retries[len(retries)-1]
	if lo < 1050*time.Millisecond || hi > 1050*time.Millisecond+100*time.Millisecond+time.Second {
		t.Errorf("retries after %v, want within Retry-After + 50 ms + up to 100 ms of jitter", retries)
	}
	// Without jitter every retry comes a few ms after 1050 ms; with up to 100 ms of it, uniform,
	// half of them come 50 ms later or more.
	if median < 1060*time.Millisecond {
		t.Errorf("retries after %v: the median is %v, within 10 ms of Retry-After + 50 ms: no jitter", retries, median)
	}
}

// An answer with no end (not the API's: a misbehaving proxy, a wrong MAILVET_URL) is read only to
// the bound on an answer, then refused, instead of being held in memory until WithTimeout ends it.
func TestEndlessAnswerIsRefusedAtTheBound(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "rid-endless")
		fmt.Fprint(w, `{"account_id":"`)
		chunk := strings.Repeat("x", 64<<10)
		for range 4096 { // up to 256 MiB, then held open until the client hangs up
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
		<-r.Context().Done()
	})
	c := client.New("sk_mgmt_test", client.WithBaseURL(srv.URL), client.WithTimeout(20*time.Second))
	start := time.Now()
	_, err := c.Account(context.Background())
	if err == nil || errors.Is(err, client.ErrTimeout) || !strings.Contains(err.Error(), "larger than") ||
		!strings.Contains(err.Error(), "rid-endless") {
		t.Fatalf("err = %v, want the answer refused as too large, with its request id", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("refused after %s", d)
	}
}
