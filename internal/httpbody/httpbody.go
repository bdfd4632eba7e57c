// Package httpbody bounds how long a file upload's body may take to arrive. A JSON body gets a
// fixed deadline (internal/api, bodyDeadline); a file of up to the list limit (docs/lists.md,
// "Uploading") on a slow link can take longer than any fixed one, so it gets an idle deadline
// instead: a stalled upload is cut, a slow but moving one is not.
package httpbody

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// IdleTimeout is how long an upload may go without a byte arriving.
const IdleTimeout = 30 * time.Second

// Idle returns r, reading which first extends the read deadline of w's connection by
// IdleTimeout. Where w cannot set deadlines (a test's recorder), r is read as it is: whoever
// holds the connection applies the deadline.
func Idle(w http.ResponseWriter, r io.Reader) io.Reader { return IdleFor(w, r, IdleTimeout) }

// IdleFor is Idle with another pause allowed.
func IdleFor(w http.ResponseWriter, r io.Reader, pause time.Duration) io.Reader {
	return &idle{r: r, rc: http.NewResponseController(w), pause: pause}
}

// IdleUntil is IdleFor that also ends at end, however steadily the body moves: a client that
// sends a byte just inside every pause cannot hold the connection for longer.
func IdleUntil(w http.ResponseWriter, r io.Reader, pause time.Duration, end time.Time) io.Reader {
	return &idle{r: r, rc: http.NewResponseController(w), pause: pause, end: end}
}

// ErrTooSlow is the error of a body cut for arriving slower than its minimum rate (WithMinRate).
var ErrTooSlow = errors.New("the body arrived slower than its minimum rate")

// WithMinRate is IdleUntil that also cuts a body which, once grace has passed since the first
// read, has arrived at fewer than rate bytes a second on average: a client that sends a line just
// inside every pause holds the connection (and whatever the server keeps for it) only as long as
// its bytes earn. Each read's deadline is also the moment the bytes so far stop earning, so a
// client that sends nothing more is cut then, not only at its next byte. rate 0 checks nothing.
// The read that is cut fails with an error that is both ErrTooSlow and os.ErrDeadlineExceeded.
func WithMinRate(w http.ResponseWriter, r io.Reader, pause time.Duration, end time.Time, rate int64, grace time.Duration) io.Reader {
	return &idle{r: r, rc: http.NewResponseController(w), pause: pause, end: end, rate: rate, grace: grace}
}

type idle struct {
	r     io.Reader
	rc    *http.ResponseController
	pause time.Duration
	end   time.Time // zero: none

	rate  int64 // bytes a second; 0: none
	grace time.Duration
	start time.Time
	got   int64
}

func (d *idle) Read(p []byte) (int, error) {
	now := time.Now()
	deadline := now.Add(d.pause)
	if !d.end.IsZero() && d.end.Before(deadline) {
		deadline = d.end
	}
	var earned time.Time
	if d.rate > 0 {
		if d.start.IsZero() {
			d.start = now
		}
		earned = d.start.Add(max(d.grace, time.Duration(float64(d.got)/float64(d.rate)*float64(time.Second))))
		if earned.Before(deadline) {
			deadline = earned
		}
	}
	_ = d.rc.SetReadDeadline(deadline)
	n, err := d.r.Read(p)
	d.got += int64(n)
	if d.rate > 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(earned) {
			return n, fmt.Errorf("%w: %w", ErrTooSlow, err)
		}
		// Where deadlines cannot be set (a test's recorder), the rate is checked as bytes arrive.
		if err == nil && time.Now().After(earned) && d.got < d.owed(time.Now()) {
			return n, ErrTooSlow
		}
	}
	return n, err
}

// owed is how many bytes the body should have delivered by now.
func (d *idle) owed(now time.Time) int64 {
	return int64(now.Sub(d.start).Seconds() * float64(d.rate))
}
