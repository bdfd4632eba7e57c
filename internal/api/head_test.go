package api

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

// Every GET route answers HEAD as it answers GET (docs/api.md, "Conventions"): the same key
// check, the same status and the same headers, Content-Type and Content-Length included, and no
// body. The routes are taken from /openapi.json, so a new GET is covered without a new case; the
// server is the real one on a real connection, which is what drops a HEAD's body.
func TestHeadIsAnsweredLikeGet(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, std := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	list := b.upload(std, "text/plain", "", "ann@acme.test\nbob@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	job := b.verify(std, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	ts := httptest.NewServer(b.srv.Handler())
	t.Cleanup(ts.Close)

	type target struct{ path, key string }
	var targets []target
	doc, _ := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		if item.Get == nil {
			continue
		}
		key := ""
		switch {
		case strings.HasPrefix(path, "/v1/email/"):
			key = std
		case strings.HasPrefix(path, "/v1/management/"):
			key = mgmt
		}
		p := strings.NewReplacer("{job_id}", job, "{id}", list).Replace(path)
		targets = append(targets, target{p, key})
	}
	targets = append(targets,
		target{"/v1/email/lists/" + list + "/results?format=ndjson&status=deliverable", std},
		target{"/v1/email/jobs/" + newUUID(), std},         // 404 job_not_found
		target{"/v1/email/lists/" + newUUID(), std},        // 404 list_not_found
		target{"/v1/email/lists?limit=0", std},             // 400 invalid_request
		target{"/v1/email/lists?limit=1&limit=2", std},     // 400, before the key
		target{"/v1/management/account", ""},               // 401 missing_api_key
		target{"/v1/management/account", "sk_mgmt_nope"},   // 401 invalid_api_key
		target{"/v1/management/account", std},              // 403 wrong_key_type
		target{"/v1/email/jobs/" + job, mgmt},              // 403 wrong_key_type
		target{"/v1/email/nope", std},                      // 404 not_found
		target{"/v1/email/verify", std},                    // 405, Allow: POST
		target{"/v1/management/usage/summary?x=%zz", mgmt}, // 400 malformed query
	)
	client := ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method string, tg target) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+tg.path, nil)
		mustOK(t, err)
		if tg.key != "" {
			req.Header.Set("Authorization", "Bearer "+tg.key)
		}
		resp, err := client.Do(req)
		mustOK(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		mustOK(t, err)
		assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
		return resp, raw
	}
	statuses := map[int]bool{}
	for _, tg := range targets {
		get, _ := send(http.MethodGet, tg)
		head, raw := send(http.MethodHead, tg)
		statuses[get.StatusCode] = true
		if head.StatusCode != get.StatusCode {
			t.Errorf("HEAD %s: %d, GET %d (Allow %q)", tg.path, head.StatusCode, get.StatusCode, head.Header.Get("Allow"))
			continue
		}
		if len(raw) != 0 {
			t.Errorf("HEAD %s: a body of %d bytes", tg.path, len(raw))
		}
		if got, want := headers(head.Header), headers(get.Header); !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("HEAD %s: headers %v, GET's %v", tg.path, got, want)
		}
		// The length is GET's, but where the HTTP server cannot know it without the body: a
		// results download and the account export are not generated for a HEAD (they would be
		// read to be dropped), and an empty body (a redirect's) leaves a HEAD without one.
		built := strings.Contains(tg.path, "/results") || strings.HasSuffix(tg.path, "/account/export")
		if cl := get.Header.Get("Content-Length"); head.Header.Get("Content-Length") != cl && !built && cl != "0" {
			t.Errorf("HEAD %s: Content-Length %q, GET's %q", tg.path, head.Header.Get("Content-Length"), cl)
		}
		if get.Header.Get("Content-Type") == "" && get.StatusCode != http.StatusFound {
			t.Errorf("GET %s: no Content-Type", tg.path)
		}
	}
	for _, s := range []int{200, 302, 400, 401, 403, 404, 405} {
		if !statuses[s] {
			t.Errorf("no target answered %d: the cases no longer cover it", s)
		}
	}

	// Allow names HEAD wherever it names GET, and a HEAD of a path without GET is a 405 too.
	for _, c := range []struct{ method, path, key, allow string }{
		{http.MethodPut, "/v1/email/jobs/" + job, std, "GET, HEAD"},
		{http.MethodPost, "/v1/email/lists/" + list, std, "GET, HEAD, DELETE"},
		{http.MethodPatch, "/v1/management/keys", mgmt, "GET, HEAD, POST"},
		{http.MethodDelete, "/readyz", "", "GET, HEAD"},
		{http.MethodHead, "/v1/email/lists/" + list + "/cancel", std, "POST"},
		{http.MethodHead, "/v1/stripe/webhook", "", "POST"},
	} {
		resp, _ := send(c.method, target{c.path, c.key})
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.allow)
		}
	}
}

// headers are the response headers a HEAD must share with its GET: all but the ones that differ
// from one response to the next, and the length, checked on its own.
func headers(h http.Header) map[string][]string {
	out := maps.Clone(h)
	delete(out, "Date")
	delete(out, "X-Request-Id")
	delete(out, "Content-Length")
	return out
}
