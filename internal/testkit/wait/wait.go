// Package wait lets a test wait for something another goroutine or process does: it polls a
// condition until it holds and fails the test, naming what it waited for, when it does not hold
// in time. Tests wait for the domain's state (a delivery delivered, a hold released) through it
// instead of sleeping for a fixed time, so they finish as soon as the state is reached.
package wait

import (
	"testing"
	"time"
)

// Every is how often For asks its condition again. It is short, so that a test waits at most a
// few milliseconds beyond the moment its condition holds, and long enough that polling a
// database or an HTTP endpoint does not load the machine.
const Every = 10 * time.Millisecond

// For calls cond until it returns true. When within has passed and cond still returns false, it
// fails t with "timed out after <within> waiting for <what>". cond is always called at least
// once, and once more after the deadline, so a condition that holds just as time runs out passes.
//
// For must be called from the goroutine running the test (it may call t.Fatalf).
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Until calls cond until it returns true or within has passed, and reports whether cond held.
// Tests use it where running out of time is an outcome to check rather than a failure.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return cond()
		}
		time.Sleep(Every)
	}
}
