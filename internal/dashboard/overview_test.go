package dashboard

import (
	"testing"
	"time"
)

// The usage period's end is exclusive: the overview names the last day it includes.
func TestPeriodText(t *testing.T) {
	month := func(y int, m time.Month) (time.Time, time.Time) {
		s := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 1, 0)
	}
	for _, c := range []struct {
		y    int
		m    time.Month
		want string
	}{{2026, time.November, "1 Nov – 30 Nov 2026"}, {2026, time.December, "1 Dec – 31 Dec 2026"}, {2028, time.February, "1 Feb – 29 Feb 2028"}} {
		if got := periodText(month(c.y, c.m)); got != c.want {
			t.Errorf("%d-%02d: %q, want %q", c.y, c.m, got, c.want)
		}
	}
	if got := periodText(time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)); got != "20 Dec 2026 – 19 Jan 2027" {
		t.Errorf("across a year: %q", got)
	}
}
