package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/natstest"
	"github.com/mailvet/mailvet/internal/pgtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

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

// serveUntilStopped runs the API with env, checks it serves and is ready, then stops it as
// Ctrl-C would and requires a clean exit within 5 s.
func serveUntilStopped(t *testing.T, args []string, env map[string]string) string {
	t.Helper()
	httpAddr, opsAddr := freeAddr(t), freeAddr(t)
	env["MAILVET_HTTP_ADDR"], env["MAILVET_METRICS_ADDR"] = httpAddr, opsAddr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, envFrom(env), &stdout, &stderr) }()

	waitHTTP(t, "http://"+httpAddr+"/healthz", 200)
	waitHTTP(t, "http://"+httpAddr+"/readyz", 200)
	waitHTTP(t, "http://"+opsAddr+"/readyz", 200)
	waitHTTP(t, "http://"+opsAddr+"/metrics", 200)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("api did not stop within 5 s")
	}
	return stdout.String()
}

func TestServeAndStopCleanly(t *testing.T) {
	serveUntilStopped(t, nil, map[string]string{"DATABASE_URL": pgtest.URL(t), "NATS_URL": natstest.URL(t)})
}

// Dev mode creates and migrates the database and starts embedded NATS, as `make run` does.
func TestDevModeBootstrapsEverything(t *testing.T) {
	t.Chdir(t.TempDir())
	out := serveUntilStopped(t, []string{"-dev"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)})
	if !strings.Contains(out, "Mailvet is running") || !strings.Contains(out, "sk_mgmt_") || !strings.Contains(out, "sk_live_") {
		t.Errorf("dev banner missing: %q", out)
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
