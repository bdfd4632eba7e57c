package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/freeport"

	"github.com/mailvet/mailvet/internal/admin"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func envFrom(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestMigrateCommandIsIdempotent(t *testing.T) {
	env := envFrom(map[string]string{"DATABASE_URL": pgtest.EmptyURL(t), "NATS_URL": "nats://127.0.0.1:1"})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"migrate"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), `"applied": 0`) {
		t.Fatalf("first migrate applied nothing: %s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"migrate"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) != `{"applied": 0}` {
		t.Fatalf("second migrate: %s", out.String())
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	err := run(context.Background(), []string{"frobnicate"}, envFrom(nil), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("err = %v", err)
	}
}

func TestBadConfigNamesVariable(t *testing.T) {
	err := run(context.Background(), nil, envFrom(map[string]string{"MAILVET_HTTP_ADDR": "nowhere"}), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "MAILVET_HTTP_ADDR") {
		t.Fatalf("err = %v", err)
	}
}

// Outside dev mode, sign-ups confirmed by mail need a relay: without one the API does not start,
// and says what to set (docs/operations.md, "Mail"). Migrations and admin commands need none.
func TestConfirmedSignupNeedsARelay(t *testing.T) {
	err := run(context.Background(), nil, envFrom(map[string]string{"NATS_URL": "nats://127.0.0.1:1"}), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "MAILVET_MAIL_SMTP_ADDR") || !strings.Contains(err.Error(), "MAILVET_DASHBOARD_SIGNUP") {
		t.Fatalf("err = %v", err)
	}
	var out bytes.Buffer
	err = run(context.Background(), []string{"admin", "help"}, envFrom(nil), &out, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("admin help without a relay: %v", err)
	}
}

// A log format the binary does not know fails start-up with the variable, the value and the choices.
func TestBadLogFormatFailsStartUp(t *testing.T) {
	err := run(context.Background(), []string{"-dev"}, envFrom(map[string]string{"MAILVET_LOG_FORMAT": "pretty"}), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `MAILVET_LOG_FORMAT: "pretty": use "text" or "json"`) {
		t.Fatalf("err = %v", err)
	}
}

// waitHTTP polls url until it answers want.
func waitHTTP(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v %v, want %d", url, resp, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// served is an API started by a test with run, as `bin/api` would run.
type served struct {
	httpAddr, opsAddr string
	stdout, stderr    logtest.Buffer // read while run writes
	cancel            context.CancelFunc
	done              chan error
}

// startServing runs the API with args and env on free loopback ports and waits until it serves
// and is ready.
func startServing(t *testing.T, args []string, env map[string]string) *served {
	t.Helper()
	s := &served{httpAddr: freeport.Addr(t), opsAddr: freeport.Addr(t), done: make(chan error, 1)}
	env["MAILVET_HTTP_ADDR"], env["MAILVET_METRICS_ADDR"] = s.httpAddr, s.opsAddr
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	t.Cleanup(cancel)
	go func() { s.done <- run(ctx, args, envFrom(env), &s.stdout, &s.stderr) }()

	waitHTTP(t, "http://"+s.httpAddr+"/healthz", 200)
	waitHTTP(t, "http://"+s.httpAddr+"/readyz", 200)
	waitHTTP(t, "http://"+s.opsAddr+"/readyz", 200)
	waitHTTP(t, "http://"+s.opsAddr+"/metrics", 200)
	return s
}

// stop stops the API as Ctrl-C would and requires a clean exit within 5 s.
func (s *served) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, s.stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("api did not stop within 5 s")
	}
}

// serveUntilStopped runs the API with env, checks it serves and is ready, then stops it as
// Ctrl-C would and requires a clean exit within 5 s.
func serveUntilStopped(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	s := startServing(t, args, env)
	s.stop(t)
	return s.stdout.String()
}

func TestServeAndStopCleanly(t *testing.T) {
	// Outside dev mode a mail relay is part of the configuration (docs/operations.md, "Mail"); it
	// is dialled only when the dashboard sends a link.
	serveUntilStopped(t, nil, map[string]string{"DATABASE_URL": pgtest.URL(t), "NATS_URL": natstest.URL(t),
		"MAILVET_SECRETS_KEY":    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"MAILVET_MAIL_SMTP_ADDR": "127.0.0.1:1", "MAILVET_MAIL_FROM": "noreply@mailvet.test"})
}

// Outside dev mode the API refuses to start without MAILVET_SECRETS_KEY, and says how to make
// one, before it connects to anything; a bad key is named without being echoed.
func TestServeRefusesWithoutSecretsKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"":                         "MAILVET_SECRETS_KEY: must be set",
		"not-a-key-at-all-0123456": "MAILVET_SECRETS_KEY: must be 32 random bytes",
	} {
		env := envFrom(map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "NATS_URL": "nats://127.0.0.1:1",
			"MAILVET_SECRETS_KEY": key, "MAILVET_DASHBOARD_SIGNUP": "off"})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := run(ctx, nil, env, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "base64") {
			t.Errorf("key %q: err %v, want one saying %q", key, err, want)
		}
		if key != "" && err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}

// Dev mode creates and migrates the database and starts embedded NATS, as `make run` does. Its one
// process runs every part, so it exports every failure counter of docs/operations.md from the
// start, at 0, for an alert on its increase to see the first one.
func TestDevModeBootstrapsEverything(t *testing.T) {
	t.Chdir(t.TempDir())
	s := startServing(t, []string{"-dev"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)})
	resp, err := http.Get("http://" + s.opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{
		`mailvet_job_attempt_failures_total{outcome="failed"} 0`, `mailvet_list_chunk_failures_total{outcome="failed"} 0`,
		`mailvet_verify_items_dropped_total{reason="gone"} 0`, `mailvet_verify_items_withdrawn_total 0`,
		`mailvet_verify_items_not_withdrawn_total 0`,
		`mailvet_smtp_sessions_unleased_total 0`, `mailvet_smtp_slots_given_back_total 0`,
	} {
		if !strings.Contains(string(metrics), "\n"+series+"\n") {
			t.Errorf("/metrics has no %s", series)
		}
	}
	s.stop(t)
	out := s.stdout.String()
	if !strings.Contains(out, "Mailvet is running") || !strings.Contains(out, "sk_mgmt_") || !strings.Contains(out, "sk_live_") ||
		!regexp.MustCompile(`(?m)^Dashboard: http://localhost:\d+/dashboard/ `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^API reference: http://localhost:\d+/openapi.json, errors: http://localhost:\d+/docs/errors$`).MatchString(out) {
		t.Errorf("dev banner missing: %q", out)
	}
	// Without MAILVET_SECRETS_KEY, dev mode seals under a key it keeps in .data/ (git-ignored).
	if fi, err := os.Stat(filepath.Join(".data", "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("dev secrets key: %v, %v", fi, err)
	}
}

func TestAdminCommandPrintsJSON(t *testing.T) {
	env := envFrom(map[string]string{"DATABASE_URL": pgtest.URL(t)})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"admin", "create-account", "--tier", "free", "--stripe-customer", "cus_main"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("create-account: %v: %s", err, out.String())
	}
	if !strings.Contains(out.String(), `"account_id":`) {
		t.Fatalf("stdout %q", out.String())
	}
	out.Reset()
	err := run(context.Background(), []string{"admin", "create-provisioning-key", "--customer", "cus_other"}, env, &out, &bytes.Buffer{})
	if err == nil || !strings.Contains(out.String(), `"error":"customer_not_found"`) {
		t.Fatalf("err %v stdout %q", err, out.String())
	}
}

// missingDatabaseURL names a database that does not exist on the test server.
func missingDatabaseURL(t *testing.T) string {
	u, err := url.Parse(pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/mailvet_missing_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	return u.String()
}

// A database that does not exist is not a Postgres that is down: what the user sees says to run
// `bin/api migrate`, at once, from the server and from an admin command alike.
func TestMissingDatabaseSaysMigrate(t *testing.T) {
	env := map[string]string{"DATABASE_URL": missingDatabaseURL(t), "NATS_URL": "nats://127.0.0.1:1", "MAILVET_DASHBOARD_SIGNUP": "off",
		"MAILVET_HTTP_ADDR": freeport.Addr(t), "MAILVET_METRICS_ADDR": freeport.Addr(t),
		"MAILVET_SECRETS_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, nil, envFrom(env), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("run: %v (context: %v), want an error at once", err, ctx.Err())
	}
	for _, want := range []string{"does not exist", "bin/api migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("api: %v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "is Postgres running") {
		t.Errorf("api: %v\nsends the user looking for a Postgres that is running", err)
	}

	var out bytes.Buffer
	err = run(ctx, []string{"admin", "create-account", "--tier", "free"}, envFrom(env), &out, &bytes.Buffer{})
	if err == nil || !strings.Contains(out.String(), `"error":"datastore_error"`) || !strings.Contains(out.String(), "bin/api migrate") {
		t.Errorf("admin: err %v, stdout %q; want datastore_error saying to run bin/api migrate", err, out.String())
	}
}

// `api -h` advertises `api admin help`; help in every form needs no database and exits 0, and a
// mistake on the admin command line exits 2 (ErrUsage) with the usage.
func TestAdminHelp(t *testing.T) {
	env := envFrom(map[string]string{"DATABASE_URL": missingDatabaseURL(t), "NATS_URL": "nats://127.0.0.1:1"})
	var top bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, env, &bytes.Buffer{}, &top); err != nil {
		t.Fatalf("api -h: %v", err)
	}
	if !strings.Contains(top.String(), "api admin help") || !strings.Contains(top.String(), "-demo") {
		t.Errorf("api -h: %q", top.String())
	}
	for _, args := range [][]string{{"admin", "help"}, {"admin", "-h"}, {"admin", "--help"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, env, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{"create-account", "create-provisioning-key", "revoke-provisioning-key", "set-tier",
			"set-spend-cap", "--tier", "--email", "--stripe-customer", "--account", "--customer", "--eur", "--none"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	// A bad value is a command-line mistake too, found before the (here missing) database is opened.
	for _, args := range [][]string{{"admin"}, {"admin", "frobnicate"}, {"admin", "set-tier", "--bogus"},
		{"admin", "set-tier", "--account", "6f1d", "--tier", "gold"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, env, &out, &errOut)
		if !errors.Is(err, app.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
		if !strings.Contains(out.String(), `"error":"invalid_request"`) || !strings.Contains(errOut.String(), "usage: api admin") {
			t.Errorf("%v: stdout %q, stderr %q; want the JSON error and the usage", args, out.String(), errOut.String())
		}
	}
}

// `api migrate -h` prints migrate's usage and `api migrate extra` is a usage error (exit 2);
// neither touches the database, which stays empty.
func TestMigrateArgumentsTouchNothing(t *testing.T) {
	dbURL := pgtest.EmptyURL(t)
	env := envFrom(map[string]string{"DATABASE_URL": dbURL, "NATS_URL": "nats://127.0.0.1:1"})
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{[]string{"migrate", "-h"}, false},
		{[]string{"migrate", "--help"}, false},
		{[]string{"migrate", "extra"}, true},
		{[]string{"migrate", "-dev"}, true},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, env, &out, &errOut)
		if tc.usage != errors.Is(err, app.ErrUsage) || (!tc.usage && err != nil) {
			t.Errorf("%v: err %v, want usage error %v", tc.args, err, tc.usage)
		}
		if out.Len() != 0 || !strings.Contains(errOut.String(), "usage: api migrate") {
			t.Errorf("%v: stdout %q, stderr %q; want migrate's usage on stderr only", tc.args, out.String(), errOut.String())
		}
	}
	pool := pgtest.Pool(t, dbURL)
	var migrated bool
	pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT to_regclass('accounts') IS NOT NULL`).Scan(&migrated), "look for the schema")
	if migrated {
		t.Fatal("a migrate command line that was help or a mistake migrated the database")
	}
}

// Admin help needs no valid configuration; an admin command run with a bad one prints the JSON
// error object naming every bad variable (invalid_request) and exits 1, not 2: the command line
// was right. A mistake on the command line is still reported as such first.
func TestAdminWithBadConfiguration(t *testing.T) {
	env := envFrom(map[string]string{"DATABASE_URL": pgtest.URL(t), "MAILVET_SMTP_PORT": "x", "MAILVET_SMTP_TIMEOUT": "soon"})
	for _, args := range [][]string{{"admin", "help"}, {"admin", "-h"}, {"admin", "help", "set-tier"}, {"admin", "set-tier", "-h"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, env, &out, &bytes.Buffer{}); err != nil || !strings.Contains(out.String(), "usage: api admin") {
			t.Errorf("%v: err %v, stdout %q", args, err, out.String())
		}
	}

	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "create-account", "--tier", "free"}, env, &out, &errOut)
	if err == nil || errors.Is(err, app.ErrUsage) || !errors.Is(err, admin.ErrFailed) {
		t.Fatalf("err %v, want a failure with exit 1", err)
	}
	var obj map[string]string
	if jerr := json.Unmarshal(out.Bytes(), &obj); jerr != nil || strings.Count(strings.TrimSpace(out.String()), "\n") != 0 {
		t.Fatalf("stdout %q is not one JSON object: %v", out.String(), jerr)
	}
	if obj["error"] != "invalid_request" || !strings.Contains(obj["message"], "MAILVET_SMTP_PORT") || !strings.Contains(obj["message"], "MAILVET_SMTP_TIMEOUT") {
		t.Errorf("error object %v; want invalid_request naming both variables", obj)
	}

	out.Reset()
	err = run(context.Background(), []string{"admin", "create-account", "--tier", "gold"}, env, &out, &bytes.Buffer{})
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(out.String(), "gold") {
		t.Errorf("bad tier with a bad configuration: err %v, stdout %q; want the usage error", err, out.String())
	}
}

// set-spend-cap prints the account as stored, read back from the database, not its command line:
// an id given in upper case comes back as the account's id, the amount as the cap it holds.
func TestSetSpendCapPrintsStoredValue(t *testing.T) {
	env := envFrom(map[string]string{"DATABASE_URL": pgtest.URL(t)})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"admin", "create-account", "--tier", "builder"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var acct struct {
		ID string `json:"account_id"`
	}
	if err := json.Unmarshal(out.Bytes(), &acct); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"admin", "set-spend-cap", "--account", strings.ToUpper(acct.ID), "--eur", "049.90"}, env, &out, &bytes.Buffer{}); err != nil {
		t.Fatalf("set-spend-cap: %v: %s", err, out.String())
	}
	if want := `{"account_id":"` + acct.ID + `","hard_cap_eur":49.9}`; strings.TrimSpace(out.String()) != want {
		t.Errorf("stdout %s, want %s", out.String(), want)
	}
}

// Mistakes that waiting cannot fix stop the API before it waits for Postgres and NATS
// (docs/operations.md, "Start-up and shutdown"), here with neither reachable: a disposable file
// with a line that is no domain, and an API port another listener holds.
func TestMistakesFailBeforeTheWaits(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "extra.txt")
	if err := os.WriteFile(bad, []byte("not a domain!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	base := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "NATS_URL": "nats://127.0.0.1:1",
		"MAILVET_SECRETS_KEY": strings.Repeat("ab", 32), "MAILVET_DASHBOARD_SIGNUP": "off",
		"MAILVET_HTTP_ADDR": "127.0.0.1:0", "MAILVET_METRICS_ADDR": "127.0.0.1:0", "MAILVET_DNS_RESOLVER": "127.0.0.1:53"}
	for name, value := range map[string]string{"MAILVET_DISPOSABLE_EXTRA_FILE": bad, "MAILVET_HTTP_ADDR": held.Addr().String()} {
		env := maps.Clone(base)
		env[name] = value
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := run(ctx, nil, envFrom(env), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), name+":") || time.Since(start) > 3*time.Second {
			t.Errorf("%s=%s: after %s, err %v; want one naming the variable at once", name, value, time.Since(start).Round(time.Millisecond), err)
		}
	}
}

// An admin command against a database that is not migrated for this build says to migrate, as
// the servers do, instead of failing on a missing table (docs/operations.md, "bin/api admin").
func TestAdminSaysMigrate(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"admin", "create-account", "--tier", "free"},
		envFrom(map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)}), &out, &bytes.Buffer{})
	var obj map[string]string
	if jerr := json.Unmarshal(out.Bytes(), &obj); err == nil || jerr != nil {
		t.Fatalf("err %v, stdout %q", err, out.String())
	}
	if obj["error"] != "datastore_error" || !strings.Contains(obj["message"], "run `bin/api migrate`") {
		t.Errorf("error object %v; want datastore_error saying to run bin/api migrate", obj)
	}
}

// A DATABASE_URL whose parameters the pool cannot use is a configuration mistake: the API
// refuses to start naming the variable, and an admin command answers invalid_request, with the
// password masked.
func TestBadDatabaseURLParameters(t *testing.T) {
	url := "postgres://postgres:hunter2@127.0.0.1:1/x?sslmode=bogus"
	err := run(context.Background(), nil, envFrom(map[string]string{"DATABASE_URL": url, "MAILVET_DASHBOARD_SIGNUP": "off"}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "configuration:\nDATABASE_URL: ") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("serve: err %v; want the configuration error naming DATABASE_URL, without the password", err)
	}
	var out bytes.Buffer
	_ = run(context.Background(), []string{"admin", "set-tier", "--account", "a", "--tier", "free"}, envFrom(map[string]string{"DATABASE_URL": url}), &out, io.Discard)
	if !strings.Contains(out.String(), `"error":"invalid_request"`) || !strings.Contains(out.String(), "DATABASE_URL: ") || strings.Contains(out.String(), "hunter2") {
		t.Errorf("admin: stdout %q; want invalid_request naming DATABASE_URL, without the password", out.String())
	}
}
