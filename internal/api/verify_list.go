package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verification"
)

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
		// A JSON null decodes into a string without an error: it is not a string either.
		if err := json.Unmarshal(raw, &out[i]); err != nil || string(raw) == "null" {
			return nil, InvalidRequest("Field %s must be a string.", field)
		}
		// Checked here too, so that the first bad element is the one named.
		if err := verification.CheckEmail(field, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// streamLine is one result line of a stream: the verify result plus the position of the input it
// answers, since lines come in completion order and their normalised email cannot tell apart
// inputs that normalise alike (docs/api.md, "Verify a stream").
type streamLine struct {
	Index int `json:"index"`
	verdict.Result
}

type batchResponse struct {
	Results []verdict.Result `json:"results"`
	Count   int              `json:"count"`
}

// verifyBatch is POST /v1/email/verify/batch: results in input order, all of them or the error
// envelope (and then nothing is charged).
func (s *Server) verifyBatch(c echo.Context) error {
	start := time.Now()
	emails, err := parseList(c, verification.MaxBatch)
	if err != nil {
		return err
	}
	ans, w, err := s.verify.Batch(c.Request().Context(), s.request(c, start), emails)
	setRateHeaders(c, w)
	if err != nil {
		return err
	}
	defer ans.Close()
	wb := s.writeBound(c, start, s.batchWriteLimit)
	if err := wb.writeJSON(c, batchResponse{Results: ans.Results, Count: len(ans.Results)}); err != nil {
		// The client went away, or did not read, before it had the results: they are not owed,
		// and not kept for an Idempotency-Key's retry, which is verified and billed once it is
		// delivered.
		idempotency.NotDelivered(c)
		return nil
	}
	ans.Deliver()
	return nil
}

// verifyStream is POST /v1/email/verify/stream: one NDJSON line per result, in completion order,
// naming the index of its input, each flushed as soon as it is ready; a line is billed once its flush succeeded. A stream that
// cannot be completed (the fleet did not answer in time, the server is shutting down) ends with an
// error line: the error envelope plus the emails that were not verified and not charged. A
// stream without one is complete (docs/reliability.md).
func (s *Server) verifyStream(c echo.Context) error {
	start := time.Now()
	// Everything that can refuse the request happens before the 200 is committed.
	emails, err := parseList(c, verification.MaxStream)
	if err != nil {
		return err
	}
	st, w, err := s.verify.StartStream(c.Request().Context(), s.request(c, start), emails)
	setRateHeaders(c, w)
	if err != nil {
		return err
	}

	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, "application/x-ndjson")
	resp.Header().Set("Cache-Control", "no-store")
	// Every write to the client is bounded (docs/api.md, "Reading a stream"): a client that does
	// not take a line within writeStall, or reads on past streamWriteLimit, makes the write fail
	// as a client that went away does, and the lines not flushed yet are not charged.
	wb := s.writeBound(c, start, s.streamWriteLimit)
	rc := wb.rc
	wb.arm()
	resp.WriteHeader(http.StatusOK)
	resp.Flush()

	enc := json.NewEncoder(resp)
	undelivered, cause := st.Run(func(lines []verification.Line) (int, error) {
		// A line is owed once the flush that carries it to the connection has succeeded: the
		// encoder only fills the response's buffer, and a client that is gone shows only when
		// the buffer is written out. A line of a failed flush is taken back, like those not
		// written at all, even if some of its bytes left before the connection broke. Each line
		// is flushed under its own deadline, so that writeStall is the time a client may take
		// for one line, however many are ready at once.
		for k, l := range lines {
			wb.arm()
			if err := enc.Encode(streamLine{Index: l.Index, Result: l.Result}); err != nil {
				return k, err
			}
			if err := rc.Flush(); err != nil {
				return k, err
			}
		}
		return len(lines), nil
	})
	if cause != nil {
		wb.arm()
		_ = enc.Encode(s.streamError(cause, emails, undelivered))
		_ = rc.Flush()
	}
	return nil
}

// streamError is the last line of a stream that could not be completed: the error envelope of
// cause, plus the emails that were not verified (and not charged) and their positions in the
// request, in input order, so that the client can send exactly those again.
func (s *Server) streamError(cause error, emails []string, undelivered []int) *Error {
	e := toEnvelope(cause)
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
	// indexes tells apart inputs that emails cannot: an address sent twice, or in two forms.
	e.Extra = map[string]any{"emails": list, "indexes": undelivered}
	return e
}
