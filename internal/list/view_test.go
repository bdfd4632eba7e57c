package list_test

import (
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/list"
)

// progress is verified / unique (docs/lists.md, "Progress"): a running list with addresses left
// never shows 1, however large, and a complete one always does.
func TestProgressReachesOneOnlyWhenComplete(t *testing.T) {
	t.Parallel()
	now := time.Now()
	start := now.Add(-time.Minute)
	for _, c := range []struct {
		verified, unique int
		state            list.State
		want             float64
	}{
		{999_999, 1_000_000, list.Running, 0.9999},
		{99_996, 100_000, list.Running, 0.9999},
		{1, 3, list.Running, 0.3333},
		{2, 3, list.Running, 0.6666}, // rounded down
		{1_000_000, 1_000_000, list.Completed, 1},
		{0, 5, list.Queued, 0},
	} {
		l := list.List{Columns: []string{"email"}, State: c.state, Verified: c.verified, Unique: c.unique, StartedAt: &start}
		if got := l.View("", now).Progress; got != c.want {
			t.Errorf("%d of %d: progress %v, want %v", c.verified, c.unique, got, c.want)
		}
	}
}

// Whole-number arithmetic: no fraction of a hundredth is lost to floating point.
func TestProgressIsExactInHundredths(t *testing.T) {
	t.Parallel()
	for v := 0; v <= 100; v++ {
		l := list.List{Columns: []string{"email"}, State: list.Running, Verified: v, Unique: 100}
		if got, want := l.View("", time.Now()).Progress, float64(v)/100; got != want {
			t.Errorf("%d of 100: %v, want %v", v, got, want)
		}
	}
}
