package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// Why a request ended early, for its error envelope.
var (
	errShuttingDown = errors.New("the server is shutting down")
	errUnstored     = errors.New("the job could not be stored")
)

// stopGrace is how long a batch or stream may still wait for answers in flight once the server
// has begun to shut down; it stays well inside app.ShutdownGrace so the list can end properly.
const stopGrace = time.Second

// parseList validates the emails array of a batch or stream request.
func parseList(c echo.Context, limit int) ([]string, error) {
	var req listRequest
	if err := bindJSON(c, &req); err != nil {
		return nil, err
	}
	if req.Emails == nil {
		return nil, InvalidRequest("Field emails is required: an array of 1 to %d email addresses.", limit)
	}
	if len(req.Emails) == 0 {
		return nil, InvalidRequest("Field emails is empty; send 1 to %d email addresses.", limit)
	}
	if len(req.Emails) > limit {
		return nil, InvalidRequest("Field emails must hold 1 to %d addresses, not %d; split larger lists into several requests.", limit, len(req.Emails))
	}
	out := make([]string, len(req.Emails))
	for i, raw := range req.Emails {
		field := fmt.Sprintf("emails[%d]", i)
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, InvalidRequest("Field %s must be a string.", field)
		}
		if err := checkEmail(field, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// admitList parses a batch or stream request and admits its emails. It refuses at once, charging
// nothing, when some need the worker fleet and NATS is down or no worker is alive.
func (s *Server) admitList(c echo.Context, limit int, deadline time.Duration) ([]string, caller, *usage.Hold, error) {
	emails, err := parseList(c, limit)
	if err != nil {
		return nil, caller{}, nil, err
	}
	who := s.callerOf(c)
	remote := s.anyRemote(emails)
	if remote && !s.dispatch.Up() {
		return nil, who, nil, unavailable(queue.ErrUnavailable)
	}
	hold, err := s.admit(c, who, len(emails), deadline)
	if err != nil {
		return nil, who, nil, err
	}
	if remote && !s.dispatch.WorkersAlive(c.Request().Context()) {
		hold.Close()
		return nil, who, nil, unavailable(queue.ErrNoWorkers)
	}
	return emails, who, hold, nil
}

func (s *Server) anyRemote(emails []string) bool {
	for _, e := range emails {
		if _, final := s.local.Local(e); !final {
			return true
		}
	}
	return false
}

// runList verifies emails: local results at once, the rest through the worker fleet, calling
// each in completion order. Missing is the indexes the fleet did not answer before ctx ended.
func (s *Server) runList(ctx context.Context, emails []string, each func(i int, r verdict.Result)) (missing []int, err error) {
	var (
		remote []string
		at     []int
	)
	for i, e := range emails {
		if r, final := s.local.Local(e); final {
			each(i, r)
			continue
		}
		remote = append(remote, e)
		at = append(at, i)
	}
	if len(remote) == 0 {
		return nil, nil
	}
	m, err := s.dispatch.VerifyMany(ctx, remote, func(j int, r verdict.Result) { each(at[j], r) })
	for _, j := range m {
		missing = append(missing, at[j])
	}
	return missing, err
}

// listContext bounds a batch or stream by its deadline and by the server's shutdown, which ends
// the list stopGrace later, with cause errShuttingDown.
func (s *Server) listContext(ctx context.Context, deadline time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancelDeadline := context.WithTimeout(ctx, deadline)
	vctx, cancel := context.WithCancelCause(dctx)
	go func() {
		select {
		case <-s.stopping:
		case <-vctx.Done():
			return
		}
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(errShuttingDown)
		case <-vctx.Done():
		}
	}()
	return vctx, func() { cancel(nil); cancelDeadline() }
}

// listCause is why a list's verification ended early: the shutdown if that is what ended it,
// else the dispatcher's error.
func listCause(vctx context.Context, err error) error {
	if errors.Is(context.Cause(vctx), errShuttingDown) {
		return errShuttingDown
	}
	return err
}

type batchResponse struct {
	Results []verdict.Result `json:"results"`
	Count   int              `json:"count"`
}

// verifyBatch is POST /v1/email/verify/batch: results in input order, all of them or the error
// envelope (and then nothing is charged).
func (s *Server) verifyBatch(c echo.Context) error {
	start := time.Now()
	emails, who, hold, err := s.admitList(c, maxBatch, batchDeadline)
	if err != nil {
		return err
	}
	defer hold.Close()
	ctx := c.Request().Context()
	vctx, cancel := s.listContext(ctx, batchDeadline)
	defer cancel()
	results := make([]verdict.Result, len(emails))
	if _, err := s.runList(vctx, emails, func(i int, r verdict.Result) { results[i] = r }); err != nil {
		return unavailable(listCause(vctx, err))
	}
	lat := elapsedMS(start)
	for i := range results {
		results[i].LatencyMS = lat
	}
	if err := c.JSON(http.StatusOK, batchResponse{Results: results, Count: len(results)}); err != nil {
		return nil // the client went away before it had the results: they are not owed
	}
	rows := make([]usage.Row, len(results))
	for i := range results {
		rows[i] = usage.ResultRow(who.item(c, "verify_batch", i), results[i], nil)
	}
	hold.Deliver(rows...)
	return nil
}

// verifyStream is POST /v1/email/verify/stream: one NDJSON line per result, in completion order,
// each flushed as soon as it is ready; a line is billed once its flush succeeded. A stream that
// cannot be completed (the fleet did not answer in time, the server is shutting down) ends with an
// error line: the error envelope plus the emails that were not verified and not charged. A
// stream without one is complete (docs/reliability.md).
func (s *Server) verifyStream(c echo.Context) error {
	start := time.Now()
	// Everything that can refuse the request happens before the 200 is committed.
	emails, who, hold, err := s.admitList(c, maxStream, streamDeadline)
	if err != nil {
		return err
	}
	defer hold.Close() // gives back what did not reach the client
	ctx := c.Request().Context()
	vctx, cancel := s.listContext(ctx, streamDeadline)
	defer cancel()

	type done struct {
		i int
		r verdict.Result
	}
	ready := make(chan done, len(emails))
	var runErr error
	go func() {
		defer close(ready)
		_, runErr = s.runList(vctx, emails, func(i int, r verdict.Result) { ready <- done{i, r} })
	}()

	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, "application/x-ndjson")
	resp.Header().Set("Cache-Control", "no-store")
	resp.Header().Set("X-Content-Type-Options", "nosniff")
	resp.WriteHeader(http.StatusOK)
	resp.Flush()

	enc := json.NewEncoder(resp)
	delivered := make([]bool, len(emails))
	var (
		pending []done
		gone    bool // the client went away
	)
	// Take everything that is ready, write and flush its lines, then hand their usage rows to
	// the hold.
	for first := range ready {
		if gone {
			continue // ending: what still arrives is neither sent nor charged
		}
		pending = loop.Gather(append(pending[:0], first), ready, len(emails))
		lat := elapsedMS(start)
		for k := range pending {
			pending[k].r.LatencyMS = lat
		}
		// A line is owed once the flush that carries it to the connection has succeeded: the
		// encoder only fills the response's buffer, and a client that is gone shows only when
		// the buffer is written out. Lines of a failed flush are taken back, like those not
		// written at all, even if some of their bytes left before the connection broke.
		for _, x := range pending {
			if enc.Encode(x.r) != nil {
				gone = true
				break
			}
		}
		if !gone && http.NewResponseController(resp.Writer).Flush() != nil {
			gone = true
		}
		if gone {
			cancel() // stop verifying for a client that is not there
			continue
		}
		rows := make([]usage.Row, len(pending))
		for k, x := range pending {
			delivered[x.i] = true
			rows[k] = usage.ResultRow(who.item(c, "verify_stream", x.i), x.r, nil)
		}
		hold.Deliver(rows...)
	}

	var undelivered []int
	for i, ok := range delivered {
		if !ok {
			undelivered = append(undelivered, i)
		}
	}
	if len(undelivered) == 0 {
		return nil
	}
	cause := listCause(vctx, runErr)
	if cause == nil {
		cause = queue.ErrTimeout
	}
	s.log.Warn("stream ended early", "undelivered", len(undelivered), "of", len(emails), "client_gone", gone, "err", cause)
	if !gone {
		_ = enc.Encode(s.streamError(cause, emails, undelivered))
		resp.Flush()
	}
	return nil
}

// streamError is the last line of a stream that could not be completed: the error envelope of
// cause, plus the emails that were not verified (and not charged), in input order, so that the
// client can send exactly those again.
func (s *Server) streamError(cause error, emails []string, undelivered []int) *Error {
	e := unavailable(cause)
	e.Header = nil
	e.Message = fmt.Sprintf("%d of %d addresses were not verified: %s.", len(undelivered), len(emails), publicCause(cause))
	if e.cause != nil {
		s.log.Warn("stream ended early", "err", e.cause, "undelivered", len(undelivered))
	}
	e.Action = "Send the addresses listed in emails again; nothing was charged for them."
	e.Docs = s.docsURL(e.Code)
	list := make([]string, len(undelivered))
	for k, i := range undelivered {
		list[k] = emails[i]
	}
	e.Extra = map[string]any{"emails": list}
	return e
}
