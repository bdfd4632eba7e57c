package wait_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A condition that becomes true while For waits ends the wait soon after, not at the deadline.
func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(30*time.Millisecond, func() { done.Store(true) })
	start := time.Now()
	wait.For(t, 5*time.Second, "the timer", done.Load)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("For took %s for a condition that held after 30ms", took)
	}
}

// A condition that never holds fails the test after the given time, with a message naming it.
func TestForFailsNamingWhatItWaitedFor(t *testing.T) {
	rec := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() { _ = recover() }() // recorder.Fatalf stops the wait by panicking
		wait.For(rec, 50*time.Millisecond, "the impossible", func() bool { return false })
	}()
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("For gave up after %s, before its 50ms", took)
	}
	if want := "timed out after 50ms waiting for the impossible"; rec.failed != want {
		t.Fatalf("failure message %q, want %q", rec.failed, want)
	}
}

// Until reports whether the condition held in time instead of failing the test.
func TestUntilReportsTheOutcome(t *testing.T) {
	var calls atomic.Int32
	if !wait.Until(time.Second, func() bool { return calls.Add(1) >= 3 }) {
		t.Fatal("Until: false for a condition true on the third call")
	}
	if wait.Until(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until: true for a condition that never holds")
	}
}

// recorder is a testing.TB whose Fatalf records the message and panics instead of ending the
// test, so that a test can check how For fails.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r.failed)
}
