package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// The authentication matrix (docs/api.md) for both route families. /v1/email has no routes on this branch yet, so a
// probe route is added to the group the way the verify handlers will be.
func TestAuthenticationMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var seen auth.Principal
	var mu sync.Mutex
	b.srv.email.GET("/probe", func(c echo.Context) error {
		mu.Lock()
		seen = principalOf(c)
		mu.Unlock()
		return c.NoContent(http.StatusNoContent)
	})
	acct, mgmt := b.account(plan.Builder, "")
	std := b.standardKey(acct.ID)
	revoked := b.standardKey(acct.ID)
	pgtest.Must(t, b.store.RevokeStandardKey(context.Background(), acct.ID, revoked.ID), "revoke")
	unknown, _ := auth.Generate(auth.KindProvisioning)

	tests := []struct {
		name, path, auth string
		status           int
		code             string
	}{
		{"mgmt: no header", "/v1/management/account", "", 401, CodeMissingAPIKey},
		{"mgmt: Basic scheme", "/v1/management/account", "Basic dXNlcjpwYXNz", 401, CodeMissingAPIKey},
		{"mgmt: Bearer without token", "/v1/management/account", "Bearer ", 401, CodeMissingAPIKey},
		{"mgmt: raw key without scheme", "/v1/management/account", mgmt, 401, CodeMissingAPIKey},
		{"mgmt: typo", "/v1/management/account", "Bearer " + typo(mgmt), 401, CodeInvalidAPIKey},
		{"mgmt: garbage", "/v1/management/account", "Bearer hello", 401, CodeInvalidAPIKey},
		{"mgmt: unknown well-formed", "/v1/management/account", "Bearer " + unknown.Raw, 401, CodeInvalidAPIKey},
		{"mgmt: revoked standard", "/v1/management/account", "Bearer " + revoked.Raw, 401, CodeInvalidAPIKey},
		{"mgmt: standard key", "/v1/management/account", "Bearer " + std.Raw, 403, CodeWrongKeyType},
		{"mgmt: provisioning key", "/v1/management/account", "Bearer " + mgmt, 200, ""},
		{"mgmt: scheme is case-insensitive", "/v1/management/account", "bearer " + mgmt, 200, ""},
		{"email: no header", "/v1/email/probe", "", 401, CodeMissingAPIKey},
		{"email: revoked", "/v1/email/probe", "Bearer " + revoked.Raw, 401, CodeInvalidAPIKey},
		{"email: provisioning key", "/v1/email/probe", "Bearer " + mgmt, 403, CodeWrongKeyType},
		{"email: standard key", "/v1/email/probe", "Bearer " + std.Raw, 204, ""},
		// Unknown paths under the authenticated prefixes: authentication first, then 404.
		{"email unknown path: no key", "/v1/email/nope", "", 401, CodeMissingAPIKey},
		{"email unknown path: wrong family", "/v1/email/nope", "Bearer " + mgmt, 403, CodeWrongKeyType},
		{"email unknown path: right key", "/v1/email/nope", "Bearer " + std.Raw, 404, CodeNotFound},
		{"mgmt unknown path: no key", "/v1/management/nope", "", 401, CodeMissingAPIKey},
		{"mgmt unknown path: right key", "/v1/management/nope/deeper", "Bearer " + mgmt, 404, CodeNotFound},
		{"mgmt prefix itself", "/v1/management", "Bearer " + mgmt, 404, CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, raw := serve(b.srv.Handler(), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, raw)
			}
			if tt.code != "" {
				r := callHandler(t, b.srv.Handler(), http.MethodGet, tt.path, "", nil, "Authorization", tt.auth)
				assertEnvelope(t, r.body, tt.code)
			}
		})
	}
	if seen.AccountID != acct.ID || seen.KeyID != std.ID || seen.Kind != auth.KindStandard || seen.Tier != plan.Builder {
		t.Errorf("principal = %+v", seen)
	}
	// Two Authorization headers, in either order: which one counts would be a guess.
	for _, pair := range [][2]string{{"Bearer " + std.Raw, "Bearer junk"}, {"Bearer junk", "Bearer " + std.Raw}} {
		req := httptest.NewRequest(http.MethodGet, "/v1/email/probe", nil)
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		resp, raw := serve(b.srv.Handler(), req)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		if resp.StatusCode != http.StatusUnauthorized || body["error"] != CodeInvalidAPIKey {
			t.Errorf("two Authorization headers: %d %s", resp.StatusCode, raw)
		}
	}
}

// typo changes key's last character to another one (a fixed replacement would, for one key in
// dozens, be the character already there).
func typo(key string) string {
	last := key[len(key)-1]
	repl := byte('x')
	if last == repl {
		repl = 'y'
	}
	return key[:len(key)-1] + string(repl)
}

func TestWrongKeyTypeActionSaysWhatToDo(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acct, mgmt := b.account(plan.Free, "")
	std := b.standardKey(acct.ID)
	r := b.call(http.MethodGet, "/v1/management/keys", std.Raw, nil).want(t, 403, CodeWrongKeyType)
	if a := r.body["action"].(string); !strings.Contains(a, "provisioning key") || !strings.Contains(a, "dashboard") {
		t.Errorf("management action %q must tell the client to create a provisioning key in the dashboard", a)
	}
	r = b.call(http.MethodGet, "/v1/email/anything", mgmt, nil).want(t, 403, CodeWrongKeyType)
	if a := r.body["action"].(string); !strings.Contains(a, "standard key") {
		t.Errorf("email action %q must tell the client to use a standard key", a)
	}
}

// Two API replicas on one database: a key revoked through one is refused by both on the very next
// request.
func TestRevocationIsImmediateOnEveryReplica(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	cfg, err := config.Load(config.RoleAPI, false, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*httptest.Server
	for range 2 {
		pool := pgtest.Pool(t, url)
		s := New(Deps{Config: cfg, Log: app.NewLogger(testWriter{t}, "test"), Pool: pool, Ready: health.NewChecker(0)})
		s.email.GET("/probe", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		replicas = append(replicas, srv)
	}
	b := &testBundle{t: t, cfg: cfg, pool: pgtest.Pool(t, url)}
	b.store = accountStore(b.pool)
	acct, mgmt := b.account(plan.Free, "")
	std := b.standardKey(acct.ID)

	get := func(srv *httptest.Server, path, key string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, srv := range replicas {
		if got := get(srv, "/v1/email/probe", std.Raw); got != 204 {
			t.Fatalf("replica %d before revocation: %d", i, got)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, replicas[0].URL+"/v1/management/keys/"+std.ID, nil)
	req.Header.Set("Authorization", "Bearer "+mgmt)
	resp, err := replicas[0].Client().Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("revoke through replica 0: %v %v", resp, err)
	}
	resp.Body.Close()
	for i, srv := range replicas {
		if got := get(srv, "/v1/email/probe", std.Raw); got != 401 {
			t.Errorf("replica %d after revocation: %d, want 401", i, got)
		}
	}
}

// Keys must never reach the logs, not even on failures.
func TestKeysAreNeverLogged(t *testing.T) {
	t.Parallel()
	var logs logtest.Buffer
	b := setup(t, nil, func(d *Deps) { d.Log = app.NewLogger(&logs, "test") })
	acct, mgmt := b.account(plan.Free, "")
	std := b.standardKey(acct.ID)
	b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, 200, "")
	b.call(http.MethodGet, "/v1/management/account", std.Raw, nil).want(t, 403, CodeWrongKeyType)
	created := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci"}).want(t, 201, "")
	for _, secret := range []string{mgmt, std.Raw, created.body["key"].(string), mgmt[8:20]} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a key appears in the logs")
		}
	}
	if !strings.Contains(logs.String(), "/v1/management/account") {
		t.Fatalf("no request was logged at all: %q", logs.String())
	}
}
