package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
)

// cutInput is 1,005 addresses, two requests of VerifyStream, written as a caller might (blanks,
// an uppercase domain, a repeat), so that the error is seen to name them as given, not normalised.
func cutInput() []string {
	emails := make([]string, client.StreamChunkSize+5)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%04d@acme.example", i)
	}
	emails[7] = " ann@ACME.example"
	emails[8] = "ann@acme.example"
	emails[1002] = "zoe@Acme.Example\t"
	return emails
}

// A stream cut without an error line names the inputs without a result: their positions in the
// caller's input and the addresses as given, the cut request's and the unsent request's, in input
// order. The cause stays reachable with errors.Is, and the second request is never sent.
func TestStreamCutNamesTheInputsWithoutAResult(t *testing.T) {
	t.Parallel()
	answeredFirst := []int{999, 3, 8, 0} // completion order
	for name, end := range map[string]func(t *testing.T, w http.ResponseWriter){
		"connection dropped":  func(t *testing.T, w http.ResponseWriter) { hangUp(t, w) },
		"ended between lines": func(*testing.T, http.ResponseWriter) {},
		"ended inside a line": func(_ *testing.T, w http.ResponseWriter) { fmt.Fprint(w, streamLine(5)[:30]) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.Header().Set("X-Request-Id", "req-cut")
				for _, k := range answeredFirst {
					fmt.Fprintln(w, streamLine(k))
				}
				w.(http.Flusher).Flush()
				end(t, w)
			})
			emails := cutInput()
			rs, streamErr := drain(client.New("k", client.WithBaseURL(srv.URL)).VerifyStream(context.Background(), emails))
			got := indexesOf(rs)
			if !slices.Equal(got, answeredFirst) {
				t.Fatalf("results for %v, want %v", got, answeredFirst)
			}
			var cut *client.StreamCutError
			if !errors.As(streamErr, &cut) {
				t.Fatalf("err %v (%T), want a *client.StreamCutError", streamErr, streamErr)
			}
			if !errors.Is(streamErr, io.ErrUnexpectedEOF) || !strings.Contains(streamErr.Error(), "(request id req-cut)") ||
				!strings.Contains(streamErr.Error(), "after 4 of 1000 results") {
				t.Errorf("err %v: want io.ErrUnexpectedEOF, the request id and the count", streamErr)
			}
			var apiErr *client.Error
			if errors.As(streamErr, &apiErr) {
				t.Errorf("a cut stream is an *Error too (%v): callers would take it for the API's answer", apiErr)
			}
			var wantIx []int
			var wantEmails []string
			for i, e := range emails {
				if !slices.Contains(answeredFirst, i) {
					wantIx = append(wantIx, i)
					wantEmails = append(wantEmails, e)
				}
			}
			if !slices.Equal(cut.Indexes, wantIx) {
				t.Errorf("Indexes: %d of them, %v … %v; want the 996 of the first request without a line and 1000-1004",
					len(cut.Indexes), cut.Indexes[:min(6, len(cut.Indexes))], cut.Indexes[max(0, len(cut.Indexes)-6):])
			}
			if !slices.Equal(cut.Emails, wantEmails) {
				t.Errorf("Emails: %d of them, want %d, the addresses at Indexes as given", len(cut.Emails), len(wantEmails))
			}
			if cut.Emails[5] != " ann@ACME.example" || cut.Emails[len(cut.Emails)-3] != "zoe@Acme.Example\t" {
				t.Errorf("Emails %q … %q: not the addresses as given", cut.Emails[:6], cut.Emails[len(cut.Emails)-3:])
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests: the chunk after a cut stream was sent", n)
			}
		})
	}
}

// A cut in the second request names only that request's inputs without a line, at their
// positions in the whole input: the first request was complete.
func TestStreamCutInTheSecondRequest(t *testing.T) {
	t.Parallel()
	_, srv := newFake(t, func(i int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		n := client.StreamChunkSize
		if i == 1 {
			n = 2
		}
		for k := range n {
			fmt.Fprintln(w, streamLine(k))
		}
		if i == 1 {
			w.(http.Flusher).Flush()
			hangUp(t, w)
		}
	})
	emails := cutInput()
	rs, streamErr := drain(client.New("k", client.WithBaseURL(srv.URL)).VerifyStream(context.Background(), emails))
	results := len(rs)
	var cut *client.StreamCutError
	if !errors.As(streamErr, &cut) || results != 1002 {
		t.Fatalf("%d results, err %v; want 1,002 and a *client.StreamCutError", results, streamErr)
	}
	if fmt.Sprint(cut.Indexes) != "[1002 1003 1004]" || !slices.Equal(cut.Emails, emails[1002:]) {
		t.Errorf("Indexes %v, Emails %q; want 1002-1004 and their addresses as given", cut.Indexes, cut.Emails)
	}
}

// End-to-end: the real API's stream, through a proxy that passes the first request's first lines
// on and then drops the client's connection, as a proxy's timeout does. The error names exactly
// the inputs the client got no line for, with the unsent request's, as given.
func TestE2EStreamCutByAProxy(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	const passed = 10 // lines the proxy passes on before it drops the connection
	var requests atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, s.URL+r.URL.RequestURI(), r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		for k := 0; k < passed && sc.Scan(); k++ {
			fmt.Fprintln(w, sc.Text())
		}
		w.(http.Flusher).Flush()
		hangUp(t, w)
	}))
	t.Cleanup(proxy.Close)

	emails := make([]string, client.StreamChunkSize+5)
	for i := range emails {
		emails[i] = fmt.Sprintf("c%04d@mailinator.com", i) // disposable: decided at once
	}
	emails[3], emails[1001] = " ann@ACME.example", "Zoe@Acme.Example "
	c := client.New(s.StandardKey, client.WithBaseURL(proxy.URL), client.WithTimeout(30*time.Second))
	rs, streamErr := drain(c.VerifyStream(context.Background(), emails))
	seen := map[int]bool{}
	for _, r := range rs {
		seen[r.Index] = true
	}
	var cut *client.StreamCutError
	if !errors.As(streamErr, &cut) || !errors.Is(streamErr, io.ErrUnexpectedEOF) || len(seen) != passed {
		t.Fatalf("%d results, err %v (%T); want %d and a *client.StreamCutError wrapping io.ErrUnexpectedEOF", len(seen), streamErr, streamErr, passed)
	}
	var wantIx []int
	for i := range emails {
		if !seen[i] {
			wantIx = append(wantIx, i)
		}
	}
	if !slices.Equal(cut.Indexes, wantIx) || len(cut.Emails) != len(wantIx) {
		t.Fatalf("Indexes (%d) %v…; want the %d inputs without a line", len(cut.Indexes), cut.Indexes[:min(5, len(cut.Indexes))], len(wantIx))
	}
	for k, i := range cut.Indexes {
		if cut.Emails[k] != emails[i] {
			t.Fatalf("Emails[%d] = %q, want %q (input %d as given)", k, cut.Emails[k], emails[i], i)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests: the chunk after a cut stream was sent", n)
	}
}
