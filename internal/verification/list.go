package verification

import (
	"context"
	"errors"
	"time"

	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// admitList admits the emails of a batch or stream. It refuses at once, charging nothing, when
// some need the worker fleet and the broker is down or no worker is alive.
func (s *Service) admitList(ctx context.Context, who Caller, emails []string, limit int, deadline time.Duration) (*usage.Hold, Window, error) {
	if err := checkList(emails, limit); err != nil {
		return nil, Window{}, err
	}
	remote := s.anyRemote(emails)
	if remote && !s.fleet.Up() {
		return nil, Window{}, unavailable(queue.ErrUnavailable)
	}
	hold, w, err := s.admit(ctx, who, len(emails), deadline)
	if err != nil {
		return nil, w, err
	}
	if remote && !s.fleet.WorkersAlive(ctx) {
		hold.Close()
		return nil, w, unavailable(queue.ErrNoWorkers)
	}
	return hold, w, nil
}

func (s *Service) anyRemote(emails []string) bool {
	for _, e := range emails {
		if _, final := s.local.Local(e); !final {
			return true
		}
	}
	return false
}

// runList verifies emails: local results at once, the rest through the worker fleet, calling
// each in completion order. Missing is the indexes the fleet did not answer before ctx ended.
func (s *Service) runList(ctx context.Context, emails []string, each func(i int, r verdict.Result)) (missing []int, err error) {
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
	m, err := s.fleet.VerifyMany(ctx, remote, func(j int, r verdict.Result) { each(at[j], r) })
	for _, j := range m {
		missing = append(missing, at[j])
	}
	return missing, err
}

// listContext bounds a batch or stream by its deadline and by the service's shutdown, which ends
// the list StopGrace later, with cause ErrShuttingDown.
func (s *Service) listContext(ctx context.Context, deadline time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancelDeadline := context.WithTimeout(ctx, deadline)
	vctx, cancel := context.WithCancelCause(dctx)
	go func() {
		select {
		case <-s.stopping:
		case <-vctx.Done():
			return
		}
		t := time.NewTimer(StopGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(ErrShuttingDown)
		case <-vctx.Done():
		}
	}()
	return vctx, func() { cancel(nil); cancelDeadline() }
}

// listCause is why a list's verification ended early: the shutdown if that is what ended it,
// else the fleet's error.
func listCause(vctx context.Context, err error) error {
	if errors.Is(context.Cause(vctx), ErrShuttingDown) {
		return ErrShuttingDown
	}
	return err
}

// Batch verifies up to MaxBatch addresses: results in input order, all of them or an error (and
// then nothing is charged).
func (s *Service) Batch(ctx context.Context, req Request, emails []string) (*Answer, Window, error) {
	if req.Caller.Sandbox {
		return s.sandboxBatch(ctx, req, emails)
	}
	start := req.start()
	hold, w, err := s.admitList(ctx, req.Caller, emails, MaxBatch, BatchDeadline)
	if err != nil {
		return nil, w, err
	}
	vctx, cancel := s.listContext(ctx, BatchDeadline)
	defer cancel()
	results := make([]verdict.Result, len(emails))
	if _, err := s.runList(vctx, emails, func(i int, r verdict.Result) { results[i] = r }); err != nil {
		hold.Close()
		return nil, w, unavailable(listCause(vctx, err))
	}
	lat := elapsedMS(start)
	for i := range results {
		results[i].LatencyMS = lat
	}
	return &Answer{Results: results, hold: hold, req: req, route: "verify_batch"}, w, nil
}

// Line is one result of a stream, with its index in the request.
type Line struct {
	Index  int
	Result verdict.Result
}

// Stream is a stream request admitted and not yet run (Run).
type Stream struct {
	s      *Service
	ctx    context.Context
	req    Request
	emails []string
	hold   *usage.Hold
	start  time.Time
	// sandbox: answered by the sandbox, with no hold (docs/sandbox.md).
	sandbox bool
}

// StartStream admits up to MaxStream addresses. Everything that can refuse the request happens
// here, before the caller commits to an answer; the verification itself is Run.
func (s *Service) StartStream(ctx context.Context, req Request, emails []string) (*Stream, Window, error) {
	if req.Caller.Sandbox {
		return s.sandboxStream(ctx, req, emails)
	}
	start := req.start()
	hold, w, err := s.admitList(ctx, req.Caller, emails, MaxStream, StreamDeadline)
	if err != nil {
		return nil, w, err
	}
	return &Stream{s: s, ctx: ctx, req: req, emails: emails, hold: hold, start: start}, w, nil
}

// Run verifies the stream's emails, handing write the results that are ready, in completion
// order, as soon as they are. Write returns how many of its lines, from the first, reached the
// client, and those are billed; an error means the client went away (or stopped reading):
// verification stops, and what was not written is neither sent nor charged. Undelivered is the indexes, in input order,
// of the emails whose result did not reach the client, and cause why (nil when the client went
// away); a stream with none undelivered is complete (docs/reliability.md).
func (st *Stream) Run(write func([]Line) (int, error)) (undelivered []int, cause error) {
	if st.sandbox {
		return st.runSandbox(write)
	}
	s := st.s
	defer st.hold.Close() // gives back what did not reach the client
	vctx, cancel := s.listContext(st.ctx, StreamDeadline)
	defer cancel()

	ready := make(chan Line, len(st.emails))
	var runErr error
	go func() {
		defer close(ready)
		_, runErr = s.runList(vctx, st.emails, func(i int, r verdict.Result) { ready <- Line{i, r} })
	}()

	delivered := make([]bool, len(st.emails))
	var (
		pending []Line
		gone    bool // the client went away
	)
	// Take everything that is ready, write it, then hand its usage rows to the hold.
	for first := range ready {
		if gone {
			continue // ending: what still arrives is neither sent nor charged
		}
		pending = loop.Gather(append(pending[:0], first), ready, len(st.emails))
		lat := elapsedMS(st.start)
		for k := range pending {
			pending[k].Result.LatencyMS = lat
		}
		n, err := write(pending)
		rows := make([]usage.Row, n)
		for k, x := range pending[:n] {
			delivered[x.Index] = true
			rows[k] = usage.ResultRow(st.req.item("verify_stream", x.Index), x.Result, nil)
		}
		st.hold.Deliver(rows...)
		if err != nil {
			gone = true
			cancel() // stop verifying for a client that is not there
		}
	}

	for i, ok := range delivered {
		if !ok {
			undelivered = append(undelivered, i)
		}
	}
	if len(undelivered) == 0 {
		return nil, nil
	}
	cause = listCause(vctx, runErr)
	if cause == nil {
		cause = queue.ErrTimeout
	}
	s.log.Warn("stream ended early", "undelivered", len(undelivered), "of", len(st.emails), "client_gone", gone, "err", cause)
	if gone {
		return undelivered, nil
	}
	return undelivered, unavailable(cause)
}
