package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// testBundle is a server on a fresh, migrated database.
type testBundle struct {
	t     testing.TB
	cfg   config.Config
	pool  *pgxpool.Pool
	store *account.Store
	srv   *Server
}

// setup builds a bundle; env adds configuration variables, deps may adjust the dependencies. It
// takes a testing.TB so that fuzz targets build their server the same way.
func setup(t testing.TB, env map[string]string, adjust ...func(*Deps)) *testBundle {
	t.Helper()
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.New(t)
	store := account.NewStore(pool)
	d := Deps{Config: cfg, Log: app.NewLogger(testLogOut(t), "test"), Pool: pool, Ready: health.NewChecker(0)}
	for _, f := range adjust {
		f(&d)
	}
	srv := New(d)
	t.Cleanup(srv.Close)
	return &testBundle{t: t, cfg: cfg, pool: pool, store: store, srv: srv}
}

// account creates an account with an active provisioning key and returns both.
func (b *testBundle) account(tier plan.Tier, customer string) (account.Account, string) {
	b.t.Helper()
	ctx := context.Background()
	a, err := b.store.Create(ctx, account.NewAccount{Tier: tier, StripeCustomerID: customer})
	pgtest.Must(b.t, err, "create account")
	k, err := b.store.CreateProvisioningKey(ctx, a.ID)
	pgtest.Must(b.t, err, "create provisioning key")
	return a, k.Raw
}

// standardKey creates a standard key for an account directly in the store.
func (b *testBundle) standardKey(accountID string) account.CreatedKey {
	b.t.Helper()
	k, err := b.store.CreateStandardKey(context.Background(), accountID, "fixture", b.cfg.Plans.MaxKeys)
	pgtest.Must(b.t, err, "create standard key")
	return k
}

// reply is one response, checked against /openapi.json already.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// call sends a request to h (the bundle's server when nil). body is sent verbatim when it is a
// string, JSON-encoded otherwise; nil sends none. Content-Type is application/json when a body is
// sent unless headers override it.
func (b *testBundle) call(method, path, key string, body any, headers ...string) reply {
	b.t.Helper()
	return callHandler(b.t, b.srv.Handler(), method, path, key, body, headers...)
}

func callHandler(t testing.TB, h http.Handler, method, path, key string, body any, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(v))
	case []byte:
		rd = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, raw := serve(h, req)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, raw, err)
		}
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)
	return r
}

// want fails the test unless the reply has the status and, for errors, the envelope with code.
func (r reply) want(t testing.TB, status int, code string) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	if code != "" {
		assertEnvelope(t, r.body, code)
	}
	return r
}

func isoUTC(t testing.TB, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("timestamp %v is not a string", v)
	}
	ts, err := time.Parse("2006-01-02T15:04:05Z", s)
	if err != nil {
		t.Fatalf("timestamp %q is not ISO 8601 UTC (2006-01-02T15:04:05Z): %v", s, err)
	}
	return ts
}

// testLogOut is where a test server logs: nowhere, unless MAILVET_TEST_LOG is set.
func testLogOut(t testing.TB) io.Writer {
	if os.Getenv("MAILVET_TEST_LOG") != "" {
		return testWriter{t}
	}
	return io.Discard
}
