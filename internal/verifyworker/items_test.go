package verifyworker

import (
	"testing"
	"time"
)

// The pull clock's bound on how long a message may have sat in the pull buffer (items.go): long
// only for messages that may have been there through a long hand-over, never for a burst that
// follows an idle period, however long ago the previous messages were handed over.
func TestPullClockBoundsTimeInBuffer(t *testing.T) {
	const pull = 3
	t0 := time.Unix(1_000_000, 0)
	c := newPullClock(pull, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	take := func(arrive, handed time.Duration) time.Duration {
		sat := c.arrived(at(arrive))
		c.handed(at(handed))
		return sat
	}

	// Idle for a minute, then a burst of pull messages in one pull: all fresh.
	for i, arrive := range []time.Duration{time.Minute, time.Minute + 10*time.Microsecond, time.Minute + 20*time.Microsecond} {
		if sat := take(arrive, arrive+5*time.Microsecond); sat > time.Millisecond {
			t.Fatalf("burst message %d after idling: %v in the buffer, want ~0", i, sat)
		}
	}
	// The next hand-over blocks for 4 s (every slot busy): the pull-1 messages that may have
	// been asked for before it and buffered through it are reported as such...
	start := time.Minute + time.Second
	take(start, start+4*time.Second)
	for i := range pull - 1 {
		arrive := start + 4*time.Second + time.Duration(i+1)*10*time.Microsecond
		if sat := take(arrive, arrive+5*time.Microsecond); sat < 4*time.Second {
			t.Fatalf("message %d after the blocked hand-over: %v in the buffer, want at least 4s", i, sat)
		}
	}
	// ... but not the ones after them: they were asked for after the block.
	arrive := start + 4*time.Second + time.Millisecond/2
	if sat := take(arrive, arrive+5*time.Microsecond); sat > time.Millisecond {
		t.Fatalf("message asked for after the block: %v in the buffer, want ~0", sat)
	}
}
