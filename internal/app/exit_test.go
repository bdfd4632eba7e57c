package app_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/database"
)

// A binary told to stop while it still waits for Postgres exits 0: the wait ends with the signal
// as its cause, and the process did what it was told (an orchestrator stopping a starting pod
// would read 1 as a crash). A failure of its own after a signal, a usage mistake and any other
// failure keep their statuses.
func TestExitCode(t *testing.T) {
	// The context Main builds, on a signal this test may send itself.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGUSR1)
	defer stop()
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	}()
	_, err := database.OpenWait(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1", nil)
	if err == nil {
		t.Fatal("a Postgres on port 1 answered")
	}
	if got := app.ExitCode(ctx, err); got != 0 {
		t.Errorf("stopped while waiting (%v): exit %d, want 0", err, got)
	}
	if got := app.ExitCode(ctx, errors.New("flushing the usage rows failed")); got != 1 {
		t.Errorf("a failure of its own after the signal: exit %d, want 1", got)
	}

	running := context.Background()
	for err, want := range map[error]int{
		nil:                                   0,
		fmt.Errorf("serve: %w", app.ErrUsage): 2,
		errors.New("gave up: connection refused"): 1,
		context.Canceled: 1, // not stopped by a signal: a failure
	} {
		if got := app.ExitCode(running, err); got != want {
			t.Errorf("%v: exit %d, want %d", err, got, want)
		}
	}
}
