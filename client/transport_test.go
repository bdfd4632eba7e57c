package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
)

// These tests cut the connection of a real local server after it has read the request, so that
// the request reached the server and its answer was lost (docs/clients.md, "Network failures"):
// the client sends it again only when a repeat does nothing more.

// hangUp closes the request's connection without an answer.
func hangUp(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

const createdKey = `{"id":"k1","label":"prod","prefix":"sk_live_abcd","created_at":"2026-11-23T00:00:00Z","key":"sk_live_x","warning":"w"}`

// The first attempt's connection is cut after the server read it; the second is answered. A read,
// a keyed POST (the same key on both attempts) and a deletion are sent again; the synchronous
// single verification, which carries no key, and the stream are not: the first attempt may have
// verified and charged.
func TestTransportFailureRetriedOnlyWhenSafe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		call  func(*client.Client) error
		retry bool
		// answer is the second attempt's answer.
		answer func(w http.ResponseWriter)
	}{
		{"GET Job", func(c *client.Client) error {
			j, err := c.Job(context.Background(), "j1")
			if err == nil && j.JobID != "j" {
				return fmt.Errorf("job %+v", j)
			}
			return err
		}, true, func(w http.ResponseWriter) {
			writeJSON(w, 200, `{"job_id":"j","status":"queued","created_at":"2026-11-23T00:00:00Z"}`)
		}},
		{"keyed POST CreateKey", func(c *client.Client) error {
			k, err := c.CreateKey(context.Background(), "prod")
			if err == nil && k.Key != "sk_live_x" {
				return fmt.Errorf("key %+v", k)
			}
			return err
		}, true, func(w http.ResponseWriter) { writeJSON(w, 201, createdKey) }},
		{"keyed POST VerifyBatch", func(c *client.Client) error {
			_, err := c.VerifyBatch(context.Background(), numbered(2))
			return err
		}, true, func(w http.ResponseWriter) { writeBatch(w, numbered(2)) }},
		// The lost attempt revoked the key, so the retry is answered key_not_found: the key is
		// revoked, as asked.
		{"DELETE RevokeKey answered 404 on the retry", func(c *client.Client) error {
			return c.RevokeKey(context.Background(), "9a7e0000-0000-4000-8000-000000000001")
		}, true, func(w http.ResponseWriter) {
			writeJSON(w, 404, `{"error":"key_not_found","message":"No such key.","action":"a","docs":"d"}`)
		}},
		{"unkeyed POST Verify", func(c *client.Client) error {
			_, err := c.Verify(context.Background(), "ann@acme.example")
			return err
		}, false, func(w http.ResponseWriter) { writeJSON(w, 200, deliverable) }},
		{"stream", func(c *client.Client) error {
			for _, err := range c.VerifyStream(context.Background(), numbered(1)) {
				if err != nil {
					return err
				}
			}
			return nil
		}, false, func(w http.ResponseWriter) { fmt.Fprintln(w, streamLine(0)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var keys []string
			f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				if i == 0 {
					hangUp(t, w)
					return
				}
				tc.answer(w)
			})
			c := client.New("sk_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
			err := tc.call(c)
			n := len(f.requests())
			if tc.retry {
				if err != nil || n != 2 {
					t.Fatalf("err %v after %d requests; want the second attempt's answer", err, n)
				}
				mu.Lock()
				defer mu.Unlock()
				if keys[1] != keys[0] {
					t.Errorf("keys %q: a retry carries its first attempt's Idempotency-Key", keys)
				}
				return
			}
			if err == nil || n != 1 {
				t.Fatalf("err %v after %d requests; want the network failure, not a second request", err, n)
			}
			var apiErr *client.Error
			if errors.As(err, &apiErr) || !errors.Is(err, io.EOF) {
				t.Errorf("err %v; want the network failure (io.EOF)", err)
			}
		})
	}
}

// Network failures use the same bounded retries as the API's refusals: at most WithMaxRetries
// more attempts, with growing, jittered waits (0.5 s, then 1 s), and none with retrying off.
func TestTransportRetriesAreBounded(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { hangUp(t, w) })
	c := client.New("sk_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true), client.WithMaxRetries(2))
	start := time.Now()
	_, err := c.Account(context.Background())
	took := time.Since(start)
	reqs := f.requests()
	if err == nil || !errors.Is(err, io.EOF) || len(reqs) != 3 {
		t.Fatalf("err %v after %d requests; want the network failure after 3", err, len(reqs))
	}
	if d := reqs[1].Sub(reqs[0]); d < 500*time.Millisecond || d > 550*time.Millisecond+200*time.Millisecond {
		t.Errorf("first retry after %s, want 0.5 s and up to 50 ms of jitter", d)
	}
	if d := reqs[2].Sub(reqs[1]); d < time.Second || d > 1100*time.Millisecond+200*time.Millisecond {
		t.Errorf("second retry after %s, want 1 s and up to 100 ms of jitter", d)
	}
	if took > 3*time.Second {
		t.Errorf("took %s", took)
	}

	g, srv2 := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { hangUp(t, w) })
	if _, err := client.New("sk_test", client.WithBaseURL(srv2.URL)).Account(context.Background()); err == nil || len(g.requests()) != 1 {
		t.Fatalf("retrying off: err %v after %d requests, want 1", err, len(g.requests()))
	}
}

// The caller's cancellation is never retried, during an attempt or during the wait before a
// retry; the client's own WithTimeout of an attempt is a network failure like another.
func TestTransportRetryAndCancellation(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := client.New("sk_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Job(ctx, "j1")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled attempt: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(f.requests()); n != 1 {
		t.Errorf("cancelled attempt: %d requests, want 1", n)
	}

	g, srv2 := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) { hangUp(t, w) })
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel2) // inside the 0.5 s wait before the first retry
	start := time.Now()
	_, err = client.New("sk_test", client.WithBaseURL(srv2.URL), client.WithRetryOnRateLimit(true)).Job(ctx2, "j1")
	if err == nil || time.Since(start) > 450*time.Millisecond || len(g.requests()) != 1 {
		t.Errorf("cancelled wait: %v after %s and %d requests; want the failure at once, one request", err, time.Since(start), len(g.requests()))
	}

	h, srv3 := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			<-r.Context().Done() // the client's WithTimeout ends it
			return
		}
		writeJSON(w, 200, `{"job_id":"j","status":"queued","created_at":"2026-11-23T00:00:00Z"}`)
	})
	c3 := client.New("sk_test", client.WithBaseURL(srv3.URL), client.WithRetryOnRateLimit(true), client.WithTimeout(150*time.Millisecond))
	if _, err := c3.Job(context.Background(), "j1"); err != nil || len(h.requests()) != 2 {
		t.Errorf("timed-out attempt: %v after %d requests; want the second attempt's answer", err, len(h.requests()))
	}
}

// A refused connection sent nothing, so any request may be sent again, the unkeyed single
// verification too: it is answered once the server listens.
func TestRefusedConnectionRetriedForAnyRequest(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	var mu sync.Mutex
	var n int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		writeJSON(w, 200, deliverable)
	}))
	time.AfterFunc(200*time.Millisecond, func() { // within the 0.5 s wait before the first retry
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		srv.Listener = l
		srv.Start()
	})
	t.Cleanup(func() { time.Sleep(300 * time.Millisecond); srv.Close() })
	c := client.New("sk_test", client.WithBaseURL("http://"+addr), client.WithRetryOnRateLimit(true))
	r, err := c.Verify(context.Background(), "ann@acme.example")
	if err != nil || r.Status != client.StatusDeliverable {
		t.Fatalf("Verify = %+v, %v; want the answer once the server listens", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("%d requests reached the server, want 1", n)
	}
}

// A stream that has delivered lines is not sent again when its connection is cut: the lines
// already yielded were verified and charged, and the error says the stream is incomplete.
func TestStreamCutAfterLinesIsNotRetried(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, streamLine(0))
		w.(http.Flusher).Flush()
		hangUp(t, w)
	})
	c := client.New("sk_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	rs, streamErr := drain(c.VerifyStream(context.Background(), numbered(3)))
	got := len(rs)
	if got != 1 || !errors.Is(streamErr, io.ErrUnexpectedEOF) || len(f.requests()) != 1 {
		t.Fatalf("%d results, err %v, %d requests; want 1 result, an incomplete stream, 1 request", got, streamErr, len(f.requests()))
	}
}

// An upload is sent again after a lost answer only when its body can be replayed: a seekable
// reader from where it started, with the same Idempotency-Key and the same bytes; a reader that
// was read and cannot seek is not.
func TestUploadRetriedOnlyWhenReplayable(t *testing.T) {
	t.Parallel()
	const file = "email\nann@acme.example\nbob@initech.example\n"
	var mu sync.Mutex
	var keys []string
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if i%2 == 0 { // the first attempt of each upload
			hangUp(t, w)
			return
		}
		writeJSON(w, 202, `{"id":"l1","state":"queued"}`)
	})
	c := client.New("sk_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	seekable := strings.NewReader("skipped" + file)
	seekable.Seek(int64(len("skipped")), io.SeekStart) // the upload starts where the reader is
	l, err := c.UploadList(context.Background(), seekable, client.ListUpload{})
	if err != nil || l.ID != "l1" {
		t.Fatalf("seekable upload: %+v, %v", l, err)
	}
	f.mu.Lock()
	mu.Lock()
	if len(f.bodies) != 2 || f.bodies[0] != file || f.bodies[1] != file || keys[0] == "" || keys[1] != keys[0] {
		t.Errorf("bodies %q, keys %q; want the file twice under one key", f.bodies, keys)
	}
	mu.Unlock()
	f.mu.Unlock()

	// io.MultiReader hides the Seek of the reader inside it.
	_, err = c.UploadList(context.Background(), io.MultiReader(strings.NewReader(file)), client.ListUpload{})
	if err == nil || !errors.Is(err, io.EOF) || len(f.requests()) != 3 {
		t.Fatalf("streamed upload: err %v after %d requests; want the network failure, not a retry", err, len(f.requests()))
	}
}

// Only a retry after a lost answer takes a 404 for a deletion done: a key_not_found answered to
// the first attempt is the caller's wrong id, and an account deletion's retry answered
// invalid_api_key (which a wrong key answers too) is returned as it is.
func TestNotFoundIsAnErrorUnlessAnAnswerWasLost(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.URL.Path == "/v1/management/account" {
			if i == 1 {
				hangUp(t, w)
				return
			}
			writeJSON(w, 401, `{"error":"invalid_api_key","message":"m","action":"a","docs":"d"}`)
			return
		}
		writeJSON(w, 404, `{"error":"key_not_found","message":"No such key.","action":"a","docs":"d"}`)
	})
	c := client.New("sk_mgmt_test", client.WithBaseURL(srv.URL), client.WithRetryOnRateLimit(true))
	var e *client.Error
	if err := c.RevokeKey(context.Background(), "9a7e0000-0000-4000-8000-000000000001"); !errors.As(err, &e) || e.Code != client.CodeKeyNotFound {
		t.Errorf("RevokeKey of an unknown key = %v, want key_not_found", err)
	}
	if err := c.DeleteAccount(context.Background(), "acct"); !errors.As(err, &e) || e.Code != client.CodeInvalidAPIKey || len(f.requests()) != 3 {
		t.Errorf("DeleteAccount retried after a lost answer = %v after %d requests, want invalid_api_key after 3", err, len(f.requests()))
	}
}
