// Package httpbody bounds how long a file upload's body may take to arrive. A JSON body gets a
// fixed deadline (internal/api, bodyDeadline); a file of up to the list limit (docs/lists.md,
// "Uploading") on a slow link can take longer than any fixed one, so it gets an idle deadline
// instead: a stalled upload is cut, a slow but moving one is not.
package httpbody

import (
	"io"
	"net/http"
	"time"
)

// IdleTimeout is how long an upload may go without a byte arriving.
const IdleTimeout = 30 * time.Second

// Idle returns r, reading which first extends the read deadline of w's connection by
// IdleTimeout. Where w cannot set deadlines (an in-process call), r is read as it is: whoever
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

type idle struct {
	r     io.Reader
	rc    *http.ResponseController
	pause time.Duration
	end   time.Time // zero: none
}

func (d *idle) Read(p []byte) (int, error) {
	deadline := time.Now().Add(d.pause)
	if !d.end.IsZero() && d.end.Before(deadline) {
		deadline = d.end
	}
	_ = d.rc.SetReadDeadline(deadline)
	return d.r.Read(p)
}
