package testclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/testclock"
)

// The clock stands still until it is moved, and moves by exactly what Add is given, also when
// goroutines read it while another moves it.
func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := testclock.New(start)
	time.Sleep(5 * time.Millisecond)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v after a real pause, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Add(time.Second)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(400*time.Second); !got.Equal(want) {
		t.Fatalf("Now() = %v after 400 moves of 1 s, want %v", got, want)
	}
}
