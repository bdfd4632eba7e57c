package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/queue"
)

func newBareServer(t *testing.T) *Server {
	t.Helper()
	cfg, err := config.Load(config.RoleAPI, false, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return New(Deps{Config: cfg, Log: app.NewLogger(io.Discard, "test"), Ready: health.NewChecker(0)})
}

func do(t *testing.T, h http.Handler, method, path string) (*http.Response, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	resp := rec.Result()
	var body map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, rec.Body.String(), err)
		}
	}
	return resp, body
}

func assertEnvelope(t testing.TB, body map[string]any, code string) {
	t.Helper()
	for _, f := range []string{"error", "message", "action", "docs"} {
		if s, _ := body[f].(string); s == "" {
			t.Errorf("envelope field %q missing or empty in %v", f, body)
		}
	}
	if body["error"] != code {
		t.Errorf("error = %v, want %s", body["error"], code)
	}
	if docs, _ := body["docs"].(string); !strings.HasSuffix(docs, "/docs/errors#"+code) {
		t.Errorf("docs = %q", docs)
	}
}

func TestEchoErrorsUseTheEnvelope(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	resp, body := do(t, s.Handler(), http.MethodGet, "/v1/nope")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
	assertEnvelope(t, body, CodeNotFound)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}

	// Outside the /v1 groups as inside: 405 in the envelope, OPTIONS too (Echo answered it a
	// bare 204), and Allow names only the documented methods (Echo added OPTIONS).
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodOptions, "/healthz", "GET, HEAD"},
		{http.MethodOptions, "/openapi.json", "GET, HEAD"},
		{http.MethodPut, "/docs/errors", "GET, HEAD"},
		{http.MethodOptions, "/v1/stripe/webhook", "POST"},
		{http.MethodGet, "/v1/stripe/webhook", "POST"},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		resp, body := serve(s.Handler(), req)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.allow)
			continue
		}
		var env map[string]any
		if err := json.Unmarshal(body, &env); err != nil {
			t.Errorf("%s %s: body %q", c.method, c.path, body)
			continue
		}
		assertEnvelope(t, env, CodeMethodNotAllowed)
		assertMatchesSpec(t, req, resp.StatusCode, resp.Header, body)
	}
}

func TestPanicIsA500WithoutStack(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.echo.GET("/boom", func(echo.Context) error { panic("secret internals") })
	resp, body := do(t, s.Handler(), http.MethodGet, "/boom")
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d", resp.StatusCode)
	}
	assertEnvelope(t, body, CodeInternal)
	raw, _ := json.Marshal(body)
	if strings.Contains(string(raw), "secret internals") || strings.Contains(string(raw), "goroutine") {
		t.Errorf("500 body leaks internals: %s", raw)
	}
	if resp.Header.Get(echo.HeaderXRequestID) == "" {
		t.Error("no X-Request-Id to quote to support")
	}
}

// A handler that panics after its 200 went out (a stream, a results download) cannot answer a 500
// any more: the connection is cut without HTTP's final chunk, so the client sees an incomplete
// body instead of one that looks whole (docs/reliability.md, "An incomplete answer says so";
// docs/lists.md, "Results").
func TestPanicAfterTheAnswerBeganCutsTheConnection(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.echo.GET("/half", func(c echo.Context) error {
		res := c.Response()
		res.Header().Set(echo.HeaderContentType, "application/x-ndjson")
		res.WriteHeader(http.StatusOK)
		_, _ = res.Write([]byte(`{"email":"ann@example.com","status":"deliverable"}` + "\n"))
		res.Flush()
		panic("a bug halfway through the stream")
	})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/half")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), `{"email":"ann@example.com"`) {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	if err == nil {
		t.Errorf("the body %q ended cleanly: a client takes it for a complete answer", body)
	}
}

func TestUnexpectedErrorIsOpaque500(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.echo.GET("/fail", func(echo.Context) error { return errors.New("pq: password=hunter2") })
	resp, body := do(t, s.Handler(), http.MethodGet, "/fail")
	if resp.StatusCode != 500 || strings.Contains(body["message"].(string), "hunter2") {
		t.Fatalf("status %d body %v", resp.StatusCode, body)
	}
}

func TestEnvelopeCarriesExtraFieldsAndHeaders(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.echo.GET("/limited", func(echo.Context) error {
		e := Errorf(http.StatusTooManyRequests, "rate_limit_exceeded", "Wait until reset_at.", "Too many requests.")
		e.Extra = map[string]any{"limit": 10, "window": "1m", "error": "must not override"}
		e.Header = http.Header{"Retry-After": {"7"}}
		return e
	})
	resp, body := do(t, s.Handler(), http.MethodGet, "/limited")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
		t.Fatalf("status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	assertEnvelope(t, body, "rate_limit_exceeded")
	if body["limit"] != float64(10) || body["window"] != "1m" {
		t.Errorf("extra fields missing: %v", body)
	}
}

// The bare address sends a browser to the dashboard, as /openapi.json documents; other methods
// are refused like on any other route.
func TestRootRedirectsToTheDashboard(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	resp, body := serve(s.Handler(), req)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/dashboard/" {
		t.Fatalf("GET /: %d, Location %q; want 302 to /dashboard/", resp.StatusCode, resp.Header.Get("Location"))
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, body)
	req = httptest.NewRequest(http.MethodPost, "/", nil)
	resp, body = serve(s.Handler(), req)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q; want 405, Allow GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, body)
}

func TestHealthzOnAPIPort(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	resp, body := do(t, s.Handler(), http.MethodGet, "/healthz")
	if resp.StatusCode != 200 || body["status"] != "ok" {
		t.Fatalf("status %d body %v", resp.StatusCode, body)
	}
}

// A 503 names the class of what is down, never the error chain behind it (a broker's or a
// decoder's text, which can carry internal names); the chain is kept for the log.
func TestUnavailableNamesOnlyTheCause(t *testing.T) {
	for _, c := range []struct {
		err    error
		says   string
		logged bool
	}{
		{queue.ErrBusy, "verifier workers are saturated", false},
		{fmt.Errorf("%w: queue job: %v", queue.ErrUnavailable, errors.New("nats: no responders at mailvet_VERIFY@10.0.3.7")), "the message broker is unreachable", true},
		{fmt.Errorf("decode worker reply: %w", errors.New("invalid character 'x' in literal")), "an internal service did not answer", true},
	} {
		e := unavailable(c.err)
		if e.Status != http.StatusServiceUnavailable || e.Code != CodeServiceUnavailable {
			t.Errorf("%v: %d %s", c.err, e.Status, e.Code)
		}
		if e.Message != "Verification is temporarily unavailable: "+c.says+"." {
			t.Errorf("%v: message %q", c.err, e.Message)
		}
		if (e.cause != nil) != c.logged {
			t.Errorf("%v: cause kept for the log = %v, want %v", c.err, e.cause != nil, c.logged)
		}
	}
}
