package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// writeBound bounds the writes of a stream's or a batch's answer to its client (docs/api.md,
// "Limits"): each part must be taken within the server's writeStall, and nothing is written after
// by. A write past its deadline fails as one to a client that went away, so the request ends, the
// part not written is not billed, and the hold is given back, instead of the handler waiting on
// a client that does not read for as long as its connection lasts.
type writeBound struct {
	rc    *http.ResponseController
	stall time.Duration
	by    time.Time
}

func (s *Server) writeBound(c echo.Context, start time.Time, limit time.Duration) *writeBound {
	// The writer under echo's Response: echo's Flush drops the error of a failed flush, which is
	// what tells a line or an answer that did not reach the client.
	return &writeBound{rc: http.NewResponseController(c.Response().Writer), stall: s.writeStall, by: start.Add(limit)}
}

// arm sets the deadline of the next part. The last one also bounds the HTTP server's final flush
// of the response, after which net/http clears it for the connection's next request
// (TestWriteDeadlineDoesNotOutliveItsRequest).
func (w *writeBound) arm() {
	d := time.Now().Add(w.stall)
	if w.by.Before(d) {
		d = w.by
	}
	_ = w.rc.SetWriteDeadline(d)
}

// batchWritePart is the most of a batch's body written under one deadline: a few KB, so that a
// client reading at a few hundred bytes a second still takes each part within writeStall.
const batchWritePart = 4 << 10

// writeJSON writes v as a 200 JSON answer, bounded by w: part by part, each under its own
// deadline, then flushed, so that a nil error means the whole body was taken by the connection.
func (w *writeBound) writeJSON(c echo.Context, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	body = append(body, '\n') // as echo's c.JSON ends its bodies
	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	resp.Header().Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	w.arm()
	resp.WriteHeader(http.StatusOK)
	for len(body) > 0 {
		n := min(len(body), batchWritePart)
		w.arm()
		if _, err := resp.Write(body[:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	w.arm()
	return w.rc.Flush()
}
