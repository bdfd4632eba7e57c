package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/workertest"
)

// The worker starts against real Postgres and NATS, reports ready, and stops cleanly on signal.
func TestWorkerReadyAndStops(t *testing.T) { workertest.ReadyThenStop(t, run) }

// -h prints the usage, the check command included, and is no failure; a bad flag is a usage error.
func TestHelp(t *testing.T) {
	t.Parallel()
	workertest.Help(t, run, "check ADDRESS")
}

// An unknown command and a bad check command line are usage errors (exit 2) before anything
// starts, and `check -h` prints check's usage instead of verifying "-h". The context only bounds
// the test should the worker start serving after all.
func TestCommandLineMistakes(t *testing.T) {
	t.Parallel()
	env := workertest.UnreachableEnv
	for _, args := range [][]string{{"bogus"}, {"check"}, {"check", "a@b.example", "c@d.example"}, {"check", "-bogus", "a@b.example"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out, errOut bytes.Buffer
		err := run(ctx, args, env, &out, &errOut)
		cancel()
		if !errors.Is(err, app.ErrUsage) || out.Len() != 0 || !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("%v: err %v, stdout %q, stderr %q; want a usage error with the usage on stderr", args, err, out.String(), errOut.String())
		}
	}
	for _, args := range [][]string{{"check", "-h"}, {"check", "--help"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, env, &out, &errOut); err != nil || out.Len() != 0 ||
			!strings.Contains(errOut.String(), "usage: verifier-worker check ADDRESS") {
			t.Errorf("%v: err %v, stdout %q, stderr %q; want check's usage and no result", args, err, out.String(), errOut.String())
		}
	}
}

// A disposable file with a line that is no domain stops the worker before it waits for Postgres
// and NATS, which cannot fix it (docs/operations.md, "Start-up and shutdown").
func TestBadDisposableFileFailsBeforeTheWaits(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "extra.txt")
	if err := os.WriteFile(bad, []byte("not a domain!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		switch k {
		case "MAILVET_DISPOSABLE_EXTRA_FILE":
			return bad
		case "MAILVET_METRICS_ADDR":
			return "127.0.0.1:0"
		case "MAILVET_DNS_RESOLVER":
			return "127.0.0.1:53"
		}
		return workertest.UnreachableEnv(k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := run(ctx, nil, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "MAILVET_DISPOSABLE_EXTRA_FILE:") || time.Since(start) > 3*time.Second {
		t.Fatalf("after %s: err %v; want one naming MAILVET_DISPOSABLE_EXTRA_FILE at once", time.Since(start).Round(time.Millisecond), err)
	}
}
