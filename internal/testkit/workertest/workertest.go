// Package workertest runs a worker command's run function the way an orchestrator does: start it
// against real Postgres and NATS, wait for its /readyz, then stop it and expect a clean exit.
package workertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/freeport"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// Run is the signature of a worker's run function (cmd/*/main.go).
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// ReadyThenStop starts run with a fresh database, a NATS server and its ops listener on a free
// loopback port, fails the test unless /readyz answers 200 within 15 s, then cancels the context
// and fails unless run returns nil within 5 s.
func ReadyThenStop(t *testing.T, run Run) {
	t.Helper()
	ops := freeport.Addr(t)
	// MAILVET_SECRETS_KEY: the webhook worker refuses to start without one; the verifier ignores it.
	env := map[string]string{"DATABASE_URL": pgtest.URL(t), "NATS_URL": natstest.URL(t), "MAILVET_METRICS_ADDR": ops,
		"MAILVET_SECRETS_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logtest.Buffer // the worker writes it while a failing test reads it
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, io.Discard, &stderr) }()

	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not stop within 5 s")
	}
}

// UnreachableEnv is an environment whose Postgres and NATS are on a loopback port nothing listens
// on: a worker that is to refuse its command line before it starts does so with it, and one that
// got past it anyway fails instead of serving.
func UnreachableEnv(k string) string {
	return map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "NATS_URL": "nats://127.0.0.1:1"}[k]
}

// Help checks a worker's -h and a bad flag, which every worker answers alike: -h prints the usage,
// which names want, and is no failure; -bogus is a usage error (app.ErrUsage, exit 2).
func Help(t *testing.T, run Run, want string) {
	t.Helper()
	noEnv := func(string) string { return "" }
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, noEnv, io.Discard, &out); err != nil {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), want) {
		t.Errorf("usage %q does not name %s", out.String(), want)
	}
	if err := run(context.Background(), []string{"-bogus"}, noEnv, io.Discard, io.Discard); !errors.Is(err, app.ErrUsage) {
		t.Errorf("-bogus: %v, want a usage error", err)
	}
}
