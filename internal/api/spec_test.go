package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/labstack/echo/v4"
)

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// loadSpec parses and validates the embedded /openapi.json once per test binary.
func loadSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromData(openapiJSON)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return specDoc, specRouter
}

// assertMatchesSpec checks one real exchange against /openapi.json: the route must be documented,
// the status must be one the operation lists, and the body must match that response's schema.
// Requests to undocumented paths or methods must have been answered with the error envelope.
// Every helper that sends a request in this package's tests calls it, so each response a test
// sees is also a conformance check. Pass the request as sent (its body is not read).
func assertMatchesSpec(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	doc, router := loadSpec(t)
	// The router matches on the server URL "/", so the request's own host must not matter.
	r := req.Clone(context.Background())
	r.Host, r.URL.Host, r.URL.Scheme = "", "", ""
	r.Body = http.NoBody
	// A HEAD is answered as its GET without the body (docs/api.md, "Conventions"): it is
	// documented by the GET operation, whose statuses it must give, and has no body to check.
	head := r.Method == http.MethodHead
	if head {
		r.Method = http.MethodGet
		if len(body) > 0 {
			t.Errorf("HEAD %s answered %d with a body: %q", req.URL.Path, status, body)
		}
	}
	route, params, err := router.FindRoute(r)
	if err == nil && (hasEmptyParam(params) || hasEmptySegment(r.URL.Path)) {
		// The legacy router matches an empty segment to a path parameter (/v1/email/jobs/), and
		// a path with a trailing slash to the path without (/v1/email/lists/), but OpenAPI path
		// parameters are required and never empty, and no documented path ends in a slash: such
		// a path is not documented.
		err = routers.ErrPathNotFound
	}
	if err != nil {
		// The legacy router returns fresh RouteErrors, so compare by reason.
		if msg := err.Error(); msg != routers.ErrPathNotFound.Error() && msg != routers.ErrMethodNotAllowed.Error() {
			t.Fatalf("openapi: find route %s %s: %v", req.Method, req.URL.Path, err)
		}
		if status < 400 {
			t.Errorf("openapi: %s %s answered %d but is not documented", req.Method, req.URL.Path, status)
			return
		}
		if head {
			return
		}
		assertSchema(t, doc.Components.Schemas["Error"].Value, body, req.Method+" "+req.URL.Path)
		return
	}
	if route.Operation.Responses.Status(status) == nil && route.Operation.Responses.Default() == nil {
		t.Errorf("openapi: %s %s: status %d is not documented (body %s)", req.Method, route.Path, status, body)
		return
	}
	if head {
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("openapi: %s %s → %d does not match the spec: %v\nbody: %s", req.Method, route.Path, status, err, body)
	}
}

// hasEmptySegment reports a path with "//" or a trailing slash, which no documented path has.
func hasEmptySegment(path string) bool {
	return path != "/" && (strings.HasSuffix(path, "/") || strings.Contains(path, "//"))
}

func hasEmptyParam(params map[string]string) bool {
	for _, v := range params {
		if v == "" {
			return true
		}
	}
	return false
}

func assertSchema(t testing.TB, s *openapi3.Schema, body []byte, what string) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("openapi: %s: body is not JSON: %v: %s", what, err, body)
		return
	}
	if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("openapi: %s: body does not match the Error schema: %v", what, err)
	}
}

func TestOpenAPIDocumentIsValidAndServed(t *testing.T) {
	t.Parallel()
	doc, _ := loadSpec(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version %q, want 3.1.x", doc.OpenAPI)
	}
	s := newBareServer(t)
	req, _ := http.NewRequest(http.MethodGet, "/openapi.json", nil)
	resp, raw := serve(s.Handler(), req)
	if resp.StatusCode != 200 || !bytes.Equal(raw, openapiJSON) {
		t.Fatalf("GET /openapi.json: %d", resp.StatusCode)
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
}

// Every route registered on Echo must be documented, and every documented operation must exist,
// so the document cannot drift from routes.go.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	doc, _ := loadSpec(t)
	s := newBareServer(t)
	var registered []string
	// Every GET is answered for HEAD too, and a HEAD only where there is a GET: it is documented
	// by its GET operation (docs/api.md, "Conventions").
	gets, heads := map[string]bool{}, map[string]bool{}
	for _, r := range s.echo.Routes() {
		if r.Name == "github.com/labstack/echo/v4.glob..func1" || strings.HasSuffix(r.Path, "*") || r.Method == echo.RouteNotFound {
			continue // the groups' catch-all 404 routes
		}
		switch r.Method {
		case http.MethodHead:
			heads[r.Path] = true
			continue
		case http.MethodGet:
			gets[r.Path] = true
		}
		p := r.Path
		for _, seg := range strings.Split(p, "/") {
			if strings.HasPrefix(seg, ":") {
				p = strings.Replace(p, seg, "{"+seg[1:]+"}", 1)
			}
		}
		registered = append(registered, r.Method+" "+p)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	for path := range gets {
		if !heads[path] {
			t.Errorf("GET %s is registered without HEAD", path)
		}
	}
	for path := range heads {
		if !gets[path] {
			t.Errorf("HEAD %s is registered without GET", path)
		}
	}
	slices.Sort(registered)
	slices.Sort(documented)
	if !slices.Equal(registered, slices.Compact(documented)) {
		t.Errorf("routes and /openapi.json differ:\nregistered %v\ndocumented %v", registered, documented)
	}
}

// serve runs req through h and returns the response and its body.
func serve(h http.Handler, req *http.Request) (*http.Response, []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// Every route refuses a body over 2 MB before anything else (docs/errors.md, payload_too_large),
// so every operation of /openapi.json declares the 413 — the GETs and DELETEs too, which a
// client may still send a body to. A list upload has its own, larger limit (docs/lists.md).
func TestEveryOperationDeclaresTheBodyLimit(t *testing.T) {
	t.Parallel()
	doc, _ := loadSpec(t)
	h := newBareServer(t).Handler()
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if method == http.MethodPost && path == "/v1/email/lists" {
				continue
			}
			p := path
			for strings.Contains(p, "{") {
				i, j := strings.Index(p, "{"), strings.Index(p, "}")
				p = p[:i] + "0196d0a4-5f1e-7c3a-9b2d-4e8f6a1c3b5d" + p[j+1:]
			}
			req := httptest.NewRequest(method, p, strings.NewReader("x"))
			req.ContentLength = 2<<20 + 1
			resp, body := serve(h, req)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("%s %s with a %d-byte body: %d %s", method, path, req.ContentLength, resp.StatusCode, body)
				continue
			}
			assertMatchesSpec(t, req, resp.StatusCode, resp.Header, body)
		}
	}
}
