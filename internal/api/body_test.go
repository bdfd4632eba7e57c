package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/plan"
)

// A body trickled slower than the read deadline is cut at the deadline with 408 request_timeout,
// over a real connection, whether it has a Content-Length or is chunked. A body that arrives in
// time is unaffected, and so is a request without a body whose handler works past the deadline.
func TestBodyReadDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 500 * time.Millisecond
	b := setup(t, nil, func(d *Deps) { d.BodyReadTimeout = deadline })
	acct, mgmt := b.account(plan.Free, "")
	// A route of this test only: the server reads an idle connection in the background to notice
	// a client that leaves, and a deadline on that read would cancel the request.
	b.srv.echo.GET("/test/slow", func(c echo.Context) error {
		time.Sleep(2 * deadline)
		if err := c.Request().Context().Err(); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	})
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()

	for _, framing := range []string{"Content-Length: 100", "Transfer-Encoding: chunked"} {
		start := time.Now()
		resp, raw := trickle(t, ts.Listener.Addr().String(), mgmt, framing)
		took := time.Since(start)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("%s: status %d, want 408; body %s", framing, resp.StatusCode, raw)
		}
		if took < deadline || took > deadline+time.Second {
			t.Errorf("%s: the 408 came after %v, want the deadline of %v (+1 s)", framing, took, deadline)
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%s: body %q: %v", framing, raw, err)
		}
		assertEnvelope(t, body, CodeRequestTimeout)
		req := httptest.NewRequest(http.MethodPost, "/v1/management/keys", nil)
		assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
	}

	// A body that arrives at once, over the same kind of connection.
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/management/keys", strings.NewReader(`{"label": "prod"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+mgmt)
	if status := do1(t, req); status != http.StatusCreated {
		t.Errorf("a prompt body: status %d, want 201", status)
	}
	slow, _ := http.NewRequest(http.MethodGet, ts.URL+"/test/slow", nil)
	if status := do1(t, slow); status != http.StatusNoContent {
		t.Errorf("a bodiless request that outlives the deadline: status %d, want 204", status)
	}
	var keys int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct.ID).Scan(&keys))
	if keys != 1 {
		t.Errorf("%d standard keys, want the prompt request's only", keys)
	}
}

// A body that arrives in time is not cut later: the deadline must not end a request whose handler
// works longer than it (here a batch with a mail server that answers after 700 ms).
func TestBodyReadDeadlineSparesLongHandlers(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	b.srv.bodyTimeout = 300 * time.Millisecond
	_, key := b.customer(plan.Free)
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/email/verify/batch", strings.NewReader(`{"emails": ["sue@slow.test"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	if status := do1(t, req); status != http.StatusOK {
		t.Fatalf("status %d, want 200", status)
	}
}

// trickle sends a key-creation request's headers at once and then its body one byte every 100
// ms, and returns the server's answer.
func trickle(t *testing.T, addr, key, framing string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/management/keys HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\n%s\r\n\r\n", key, framing)
	if err != nil {
		t.Fatal(err)
	}
	chunked := strings.HasPrefix(framing, "Transfer-Encoding")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			chunk := "{"
			if chunked {
				chunk = "1\r\n{\r\n"
			}
			if _, err := io.WriteString(conn, chunk); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: no response: %v", framing, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// do1 sends req with the default client and returns the status.
func do1(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// A body of unknown length is stopped at the 2 MB limit while it is read, and still answers 413
// payload_too_large, now that bindJSON reads the whole body before decoding it.
func TestBodyGuardWithoutContentLength(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "")
	big := io.MultiReader(strings.NewReader(`{"label": "`), strings.NewReader(strings.Repeat("a", MaxBodyBytes)), strings.NewReader(`"}`))
	req := httptest.NewRequest(http.MethodPost, "/v1/management/keys", big)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+mgmt)
	if req.ContentLength != -1 {
		t.Fatalf("ContentLength %d: the request must not announce its size", req.ContentLength)
	}
	resp, raw := serve(b.srv.Handler(), req)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, body %s", resp.StatusCode, raw)
	}
	assertEnvelope(t, body, CodePayloadTooLarge)
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
}

// An upload refused before its body is read (a bad key, no dashboard session) does not hold the
// connection while the client stalls: the server drains what it can of the unread body within
// the upload's idle deadline, then answers and closes.
func TestRefusedUploadStallDoesNotHold(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	b.srv.uploadIdle = 300 * time.Millisecond
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	for _, path := range []string{"/v1/email/lists", "/dashboard/lists"} {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close() // before ts.Close, which would wait for a held connection
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer sk_live_bad\r\n"+
			"Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", path)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer while the body stalls: %v", path, err)
		}
		resp.Body.Close()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: answered after %v; the idle deadline is 300 ms", path, took)
		}
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s: %d, want the refusal (401, or 303 to sign in)", path, resp.StatusCode)
		}
	}
}

// A dashboard form over 2 MB is answered with the dashboard's own page, 413 "The form could not
// be read" (docs/dashboard.md, "Forms"), not the API's JSON envelope, over a real connection:
// announced by its Content-Length or chunked, signed in or not. The API's routes keep the
// envelope.
func TestDashboardFormOverTheBodyLimitGetsThePage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "")
	ts := httptest.NewServer(b.srv.Handler())
	defer ts.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, ct string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, body)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if strings.HasPrefix(path, "/v1/") {
			req.Header.Set("Authorization", "Bearer "+mgmt)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	csrf := func(path string) string {
		t.Helper()
		_, page := send(http.MethodGet, path, "", nil)
		m := dashboardCSRF.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no CSRF token on %s", path)
		}
		return m[1]
	}
	const form = "application/x-www-form-urlencoded"
	// big is a form whose one field takes it over the limit; chunked hides its length.
	big := func(token string, chunked bool) io.Reader {
		body := strings.NewReader(url.Values{"csrf": {token}, "label": {strings.Repeat("x", MaxBodyBytes)}}.Encode())
		if chunked {
			return io.MultiReader(body)
		}
		return body
	}
	wantPage := func(what string, resp *http.Response, page string) {
		t.Helper()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(page, "The form could not be read") {
			t.Errorf("%s: %d %s, want the dashboard's 413 page:\n%.300s", what, resp.StatusCode, resp.Header.Get("Content-Type"), page)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", what, csp)
		}
	}
	for _, chunked := range []bool{false, true} {
		resp, page := send(http.MethodPost, "/dashboard/signin", form, big(csrf("/dashboard/signin"), chunked))
		wantPage(fmt.Sprintf("sign-in, chunked %v", chunked), resp, page)
	}

	const password = "a long enough password for the test"
	resp, page := send(http.MethodPost, "/dashboard/signup", form, strings.NewReader(url.Values{"csrf": {csrf("/dashboard/signup")},
		"email": {"ann@example.com"}, "password": {password}, "password_confirm": {password}}.Encode()))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-up: %d\n%s", resp.StatusCode, page)
	}
	for _, chunked := range []bool{false, true} {
		resp, page := send(http.MethodPost, "/dashboard/keys", form, big(csrf("/dashboard/keys"), chunked))
		wantPage(fmt.Sprintf("signed in, chunked %v", chunked), resp, page)
		if !strings.Contains(page, "ann@example.com") {
			t.Errorf("signed in, chunked %v: the page is not the signed-in layout:\n%.300s", chunked, page)
		}
	}

	// The API's routes keep the envelope.
	resp, raw := send(http.MethodPost, "/v1/management/keys", "application/json", strings.NewReader(`{"label": "`+strings.Repeat("a", MaxBodyBytes)+`"}`))
	var env map[string]any
	if err := json.Unmarshal([]byte(raw), &env); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("API: %d %s", resp.StatusCode, raw)
	}
	assertEnvelope(t, env, CodePayloadTooLarge)
}
