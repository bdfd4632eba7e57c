package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log"
	"net/http"
	"net/url"
	"time"
)

// Verify verifies one address synchronously (POST /v1/email/verify).
func (c *Client) Verify(ctx context.Context, email string) (Result, error) {
	var r Result
	err := c.call(ctx, request{http.MethodPost, "/v1/email/verify", map[string]string{"email": email}}, http.StatusOK, &r)
	return r, err
}

// VerifyAsync queues the verification of one address; when it is done the service POSTs the
// signed result (a JobResult) to opts.WebhookURL. Poll it with Job.
func (c *Client) VerifyAsync(ctx context.Context, email string, opts AsyncOptions) (Accepted, error) {
	body := map[string]string{"email": email, "webhook_url": opts.WebhookURL}
	if opts.WebhookSecret != "" {
		body["webhook_secret"] = opts.WebhookSecret
	}
	var a Accepted
	err := c.call(ctx, request{http.MethodPost, "/v1/email/verify", body}, http.StatusAccepted, &a)
	return a, err
}

// Job reads an asynchronous job (GET /v1/email/jobs/{job_id}).
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.call(ctx, request{http.MethodGet, "/v1/email/jobs/" + pathEscape(id), nil}, http.StatusOK, &j)
	return j, err
}

// VerifyBatch verifies any number of addresses and returns one result per address, in input
// order. It sends BatchChunkSize addresses a request, one request after the other, so a long
// list never holds more than one request's worth of the account's per-minute limit; with
// WithRetryOnRateLimit(true) a chunk refused for the rate limit waits for the next window and a
// long list goes through at the plan's pace. On an error the results of the chunks already
// verified (and charged) are returned with it: emails[:len(results)]. The error names the part of
// emails the failed request carried, since a field the API names in it (emails[1]) counts from
// that request's first address; errors.As still finds the *Error.
//
// At the plan's pace a long list takes long (a free tier's 10 a minute: 110 addresses, 11
// minutes): VerifyBatchWith reports progress and the waits, and large inputs belong in a bulk
// list (UploadList), which is not held to the per-minute limit (docs/lists.md, "Metering").
func (c *Client) VerifyBatch(ctx context.Context, emails []string) ([]Result, error) {
	return c.VerifyBatchWith(ctx, emails, BatchOptions{})
}

// BatchOptions are VerifyBatchWith's options.
type BatchOptions struct {
	// Progress, if not nil, is called after each request is answered and before each wait for
	// the rate limit, on the calling goroutine. Without it, a wait that leaves more than a
	// minute's worth of the rate limit to go is told once on the standard logger (log.Printf),
	// with the hint to use a bulk list.
	Progress func(BatchProgress)
}

// BatchProgress is a reading of VerifyBatchWith's progress.
type BatchProgress struct {
	Done  int // addresses verified so far (and charged)
	Total int // addresses in the call
	// WaitingUntil is when a request refused for the per-minute rate limit (or answered 503 with
	// Retry-After) is sent again; zero when not waiting. RateLimit is the limit a rate-limit
	// refusal named (emails a minute).
	WaitingUntil time.Time
	RateLimit    int
	// Hint is set on the first wait that leaves more than a minute's worth of the rate limit to
	// go: how long the rest will take at this pace, and that a bulk list (UploadList) verifies
	// large inputs without the per-minute limit (docs/lists.md). Empty otherwise.
	Hint string
}

// waitHook is the context value through which call reports its waits before a retry.
type waitHook struct{}

// VerifyBatchWith is VerifyBatch with options: a progress callback.
func (c *Client) VerifyBatchWith(ctx context.Context, emails []string, opts BatchOptions) ([]Result, error) {
	results := make([]Result, 0, len(emails))
	report := opts.Progress
	hinted := false
	ctx = context.WithValue(ctx, waitHook{}, func(until time.Time, e *Error) {
		p := BatchProgress{Done: len(results), Total: len(emails), WaitingUntil: until, RateLimit: e.Limit}
		if e.Code == CodeRateLimitExceeded && e.Limit > 0 && !hinted {
			left := len(emails) - len(results)
			if minutes := (left + e.Limit - 1) / e.Limit; minutes > 1 {
				hinted = true
				p.Hint = fmt.Sprintf("mailvet: VerifyBatch: %d addresses are left at the plan's rate limit of %d a minute: about %d minutes; "+
					"for large inputs upload a bulk list instead (Client.UploadList, docs/lists.md), which is not held to the per-minute limit", left, e.Limit, minutes)
				if report == nil {
					log.Print(p.Hint)
				}
			}
		}
		if report != nil {
			report(p)
		}
	})
	err := c.chunked(emails, BatchChunkSize, func(chunk []string) error {
		var br struct {
			Results []Result `json:"results"`
		}
		if err := c.call(ctx, request{http.MethodPost, "/v1/email/verify/batch", map[string][]string{"emails": chunk}}, http.StatusOK, &br); err != nil {
			var apiErr *Error
			if errors.As(err, &apiErr) && apiErr.Code == CodeRateLimitExceeded {
				return err // chunked reads it, and may send the chunk again in smaller parts
			}
			return fmt.Errorf("mailvet: VerifyBatch: the request with emails[%d:%d] of the input: %w", len(results), len(results)+len(chunk), err)
		}
		if len(br.Results) != len(chunk) {
			return fmt.Errorf("mailvet: batch of %d answered %d results", len(chunk), len(br.Results))
		}
		for k := range br.Results {
			br.Results[k].Index = len(results) + k
		}
		results = append(results, br.Results...)
		if report != nil {
			report(BatchProgress{Done: len(results), Total: len(emails)})
		}
		return nil
	})
	return results, err
}

// chunked calls send with consecutive chunks of emails of at most size. A request larger than
// the account's whole per-minute limit can never pass (docs/errors.md, "rate_limit_exceeded"),
// so when the API answers rate_limit_exceeded with a limit smaller than the chunk, the rest of
// the list goes in chunks of that limit instead, and the chunk is sent again at once.
func (c *Client) chunked(emails []string, size int, send func([]string) error) error {
	for i := 0; i < len(emails); {
		chunk := emails[i:min(i+size, len(emails))]
		err := send(chunk)
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Code == CodeRateLimitExceeded && apiErr.Limit > 0 && apiErr.Limit < len(chunk) {
			size = apiErr.Limit
			continue
		}
		if err != nil {
			return err
		}
		i += len(chunk)
	}
	return nil
}

// maxStreamLine bounds one NDJSON line: a result is well under 1 KiB, an error line lists at most
// 1,000 addresses of at most 1,024 bytes.
const maxStreamLine = 2 << 20

// VerifyStream verifies any number of addresses through the NDJSON stream route
// (POST /v1/email/verify/stream) and yields each result as its line arrives: in completion order
// within a request, requests one after the other in chunks of StreamChunkSize. Match results to
// inputs by Result.Index, the position in emails of the address a result answers (the API's
// index on the line, plus the addresses of the requests before it): Result.Email is the
// normalised address (docs/api.md: trimmed, the domain lowercased and in ASCII form; the local
// part as sent), the same for inputs that differ only in the domain's case or in surrounding
// blanks, and for an address given twice.
//
// The iteration ends after the first error, which is yielded with a zero Result. A stream the
// service could not complete ends with an error line (docs/reliability.md): it is yielded as an
// *Error with Code "service_unavailable" whose Emails lists every address without a result, in
// input order: those of that request (not charged) and those of the chunks not sent; Indexes are
// their positions in emails. A stream cut without that line (the connection dropped, a proxy
// ended it) is yielded as a *StreamCutError that names the addresses without a result the same
// way. Rate limiting before a request's answer starts is retried as for every method
// (WithRetryOnRateLimit).
func (c *Client) VerifyStream(ctx context.Context, emails []string) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		stopped := false // the consumer broke out of the loop
		sent := 0        // addresses of the requests completed so far
		err := c.chunked(emails, StreamChunkSize, func(chunk []string) error {
			ok, err := c.streamChunk(ctx, chunk, sent, yield)
			if stopped = !ok; stopped {
				return errStopped
			}
			// The later chunks are not sent: they are owed too.
			var apiErr *Error
			var cut *StreamCutError
			switch rest := sent + len(chunk); {
			case errors.As(err, &cut):
				cut.Indexes, cut.Emails = owe(cut.Indexes, cut.Emails, emails, rest)
			case errors.As(err, &apiErr) && len(apiErr.Emails) > 0:
				apiErr.Indexes, apiErr.Emails = owe(apiErr.Indexes, apiErr.Emails, emails, rest)
			}
			if err == nil {
				sent += len(chunk)
			}
			return err
		})
		if err != nil && !stopped {
			yield(Result{}, err)
		}
	}
}

// owe adds the addresses of emails from position rest on, which were never sent, to the positions
// and addresses a stream left without a result. Both lists are allocated once, to their final
// length, when the stream has failed: nothing is kept for them while it runs.
func owe(indexes []int, owed, emails []string, rest int) ([]int, []string) {
	tail := len(emails) - rest
	ix := make([]int, len(indexes), len(indexes)+tail)
	copy(ix, indexes)
	out := make([]string, len(owed), len(owed)+tail)
	copy(out, owed)
	for i := rest; i < len(emails); i++ {
		ix = append(ix, i)
	}
	return ix, append(out, emails[rest:]...)
}

// StreamCutError ends VerifyStream when a request's stream ended before a line for each of its
// addresses and without the error line that names them (docs/api.md, "Verify a stream"): the
// connection was cut, a proxy ended the answer, or the context's deadline passed while reading.
// Indexes and Emails name every address without a result, in input order, as the error line's
// *Error does: those of the cut request and those of the requests not sent. The API bills a line
// once it has written it to the connection (docs/reliability.md, "Metering guarantees"), so a
// line in flight when the connection broke may have been charged without reaching you: sending
// these addresses again can charge a few twice, but leaves none without a result.
//
// Err is the cause, with the request id; errors.Is sees through it: io.ErrUnexpectedEOF for a
// stream that ended early, or the transport's error (a reset connection, ErrTimeout, the
// context's error).
type StreamCutError struct {
	Indexes []int    // positions in VerifyStream's emails of the addresses without a result, ascending
	Emails  []string // the addresses at Indexes, as given to VerifyStream
	Err     error
}

func (e *StreamCutError) Error() string {
	return fmt.Sprintf("%v; %d addresses without a result (StreamCutError.Emails)", e.Err, len(e.Emails))
}

func (e *StreamCutError) Unwrap() error { return e.Err }

// unanswered is the positions in the caller's input, and the addresses, of the request's
// addresses without a result line: the request's own list and its answered lines are all it
// takes.
func unanswered(chunk []string, answered []bool, offset, n int) ([]int, []string) {
	ix := make([]int, 0, len(chunk)-n)
	owed := make([]string, 0, len(chunk)-n)
	for k, done := range answered {
		if !done {
			ix = append(ix, offset+k)
			owed = append(owed, chunk[k])
		}
	}
	return ix, owed
}

// errStopped ends chunked when the consumer stopped the iteration.
var errStopped = errors.New("stopped")

// streamChunk streams one request's results into yield, each with its Index in the caller's
// input: offset, the addresses of the requests before this one, plus the line's index. ok is
// false when yield asked to stop.
func (c *Client) streamChunk(ctx context.Context, chunk []string, offset int, yield func(Result, error) bool) (ok bool, err error) {
	const path = "/v1/email/verify/stream"
	a, err := c.send(ctx, request{http.MethodPost, path, map[string][]string{"emails": chunk}}, http.StatusOK, true)
	if err != nil {
		return true, err
	}
	defer a.release()
	id := a.resp.Header.Get("X-Request-Id")
	sc := bufio.NewScanner(a.resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	n := 0
	answered := make([]bool, len(chunk)) // by the line's index
	cut := func(err error) error {
		ix, owed := unanswered(chunk, answered, offset, n)
		return &StreamCutError{Indexes: ix, Emails: owed, Err: err}
	}
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if e, isErr := decodeEnvelope(line, http.StatusServiceUnavailable); isErr {
			e.RequestID = id
			if len(e.Emails) > 0 {
				e.Indexes, _ = unanswered(chunk, answered, offset, n)
			}
			return true, e
		}
		var r struct {
			Index *int `json:"index"`
			Result
		}
		if err := json.Unmarshal(line, &r); err != nil {
			if !sc.Scan() && sc.Err() == nil {
				// The last bytes, and no JSON: the API ends every line with a newline, so the
				// stream was cut inside its last line, an incomplete stream like the one below.
				return true, cut(fmt.Errorf("mailvet: POST %s%s: the stream ended inside a line after %d of %d results: %w", path, requestIDNote(id), n, len(chunk), io.ErrUnexpectedEOF))
			}
			return true, fmt.Errorf("mailvet: POST %s%s: line %d: %w", path, requestIDNote(id), n+1, err)
		}
		// An index that is missing, outside the request or answered already would match the
		// result to the wrong input: the answer is not the API's (docs/api.md, "Verify a stream").
		if r.Index == nil || *r.Index < 0 || *r.Index >= len(chunk) || answered[*r.Index] {
			got := "none"
			if r.Index != nil {
				got = fmt.Sprint(*r.Index)
			}
			return true, fmt.Errorf("mailvet: POST %s%s: line %d: index %s is not that of an address of the request without a result yet (%d addresses)", path, requestIDNote(id), n+1, got, len(chunk))
		}
		answered[*r.Index] = true
		r.Result.Index = offset + *r.Index
		n++
		if !yield(r.Result, nil) {
			return false, nil
		}
	}
	if err := sc.Err(); err != nil {
		return true, cut(fmt.Errorf("mailvet: POST %s%s: after %d of %d results: %w", path, requestIDNote(id), n, len(chunk), timeoutCause(a.ctx, err)))
	}
	if n != len(chunk) {
		// A complete stream has one line per address (docs/api.md); fewer without an error line
		// means the connection ended early: io.ErrUnexpectedEOF, as for a cut connection.
		return true, cut(fmt.Errorf("mailvet: POST %s%s: the stream ended after %d of %d results: %w", path, requestIDNote(id), n, len(chunk), io.ErrUnexpectedEOF))
	}
	return true, nil
}

// DeleteHistory deletes what the account stores of one address, for a data subject's request
// (DELETE /v1/email/history; docs/personal-data.md, "One address's results"): its result
// snapshots, its finished jobs' email and result with their finished callbacks, and its rows in
// finished lists. Work still running keeps the address until it finishes.
func (c *Client) DeleteHistory(ctx context.Context, email string) (HistoryDeleted, error) {
	var d HistoryDeleted
	err := c.call(ctx, request{http.MethodDelete, "/v1/email/history?" + url.Values{"email": {email}}.Encode(), nil}, http.StatusOK, &d)
	return d, err
}
