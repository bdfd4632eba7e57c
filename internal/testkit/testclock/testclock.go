// Package testclock is a clock a test moves by hand. A component whose timers a test would
// otherwise wait out in real time (a grace period, a memory of what it last saw) reads the time
// through a func() time.Time in its configuration, time.Now by default; the test passes
// (*Clock).Now instead and calls Add to let the time pass at once.
package testclock

import (
	"sync"
	"time"
)

// Clock is a time that moves only when Add is called. It is safe for concurrent use: the
// component reads it from its own goroutines while the test moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time. Its signature is time.Now's, so c.Now can be handed to a
// component in place of time.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock forward by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
