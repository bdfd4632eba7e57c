package loop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// Every runs its task repeatedly, never two at once, and returns only after the run in progress
// when its context ends.
func TestEveryRunsUntilStoppedWithoutOverlap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var runs, running, overlaps atomic.Int32
	var finishedLast atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- loop.Every(ctx, 5*time.Millisecond, func(ctx context.Context) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			finishedLast.Store(false)
			time.Sleep(20 * time.Millisecond) // longer than the interval
			runs.Add(1)
			finishedLast.Store(true)
			running.Add(-1)
		})
	}()
	wait.For(t, 10*time.Second, "3 runs", func() bool { return runs.Load() >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Every: %v", err)
	}
	if !finishedLast.Load() {
		t.Error("Every returned while a run was still in progress")
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d runs overlapped", overlaps.Load())
	}
}

// Gather takes what is waiting, up to max, and never waits for more.
func TestGather(t *testing.T) {
	t.Parallel()
	in := make(chan int, 10)
	for i := 1; i <= 5; i++ {
		in <- i
	}
	if got := loop.Gather([]int{0}, in, 3); len(got) != 3 || got[2] != 2 {
		t.Errorf("Gather up to 3 = %v, want [0 1 2]", got)
	}
	if got := loop.Gather(nil, in, 10); len(got) != 3 {
		t.Errorf("Gather of what was left = %v, want [3 4 5]", got)
	}
	close(in)
	if got := loop.Gather([]int{9}, in, 10); len(got) != 1 {
		t.Errorf("Gather from a closed channel = %v, want [9]", got)
	}
}
