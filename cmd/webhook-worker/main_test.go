package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/workertest"
)

// The worker starts against real Postgres and NATS, reports ready, and stops cleanly on signal.
func TestWorkerReadyAndStops(t *testing.T) { workertest.ReadyThenStop(t, run) }

// Without MAILVET_SECRETS_KEY the worker refuses to start: it could not open the deliveries'
// sealed secrets (docs/operations.md, "Secrets at rest").
func TestWorkerRefusesWithoutSecretsKey(t *testing.T) {
	t.Parallel()
	env := workertest.UnreachableEnv
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := run(ctx, nil, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "MAILVET_SECRETS_KEY: must be set") {
		t.Fatalf("err %v, want the missing key named", err)
	}
}

// -h prints the usage with its flag and is no failure; a bad flag is a usage error.
func TestHelp(t *testing.T) {
	t.Parallel()
	workertest.Help(t, run, "-concurrency")
}

// The worker takes no arguments: a stray one is a usage error (exit 2) before anything starts.
// The context only bounds the test should the worker start serving after all.
func TestExtraArgumentIsUsageError(t *testing.T) {
	t.Parallel()
	env := workertest.UnreachableEnv
	for _, args := range [][]string{{"extra"}, {"-concurrency", "8", "serve"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var errOut bytes.Buffer
		err := run(ctx, args, env, io.Discard, &errOut)
		cancel()
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("%v: err %v, stderr %q; want a usage error with the usage", args, err, errOut.String())
		}
	}
}

// A -concurrency out of range is a usage error whose message, the one line the binary prints as
// "webhook-worker: …", names the flag and its range.
func TestConcurrencyOutOfRange(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"0", "-1", "4097"} {
		var errOut bytes.Buffer
		err := run(context.Background(), []string{"-concurrency", n}, workertest.UnreachableEnv, io.Discard, &errOut)
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "-concurrency "+n+" is not from 1 to 4096") || !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("-concurrency %s: err %v, stderr %q", n, err, errOut.String())
		}
	}
}
