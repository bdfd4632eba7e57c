package verification

import (
	"context"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// One verifies one address synchronously. Admission holds the email; it is billed once the
// caller says the answer reached the client (Answer.Deliver), behind the response
// (docs/architecture.md, "Metering and admission").
func (s *Service) One(ctx context.Context, req Request, email string) (*Answer, Window, error) {
	start := req.start()
	if err := CheckEmail("email", email); err != nil {
		return nil, Window{}, err
	}
	if req.Caller.Sandbox {
		return s.sandboxOne(ctx, req, email)
	}
	r, final := s.local.Local(email)
	var (
		hold *usage.Hold
		w    Window
		err  error
	)
	if final {
		hold, w, err = s.admit(ctx, req.Caller, 1, SyncDeadline)
	} else {
		r, hold, w, err = s.askFleet(ctx, req.Caller, email)
	}
	if err != nil {
		return nil, w, err
	}
	r.LatencyMS = elapsedMS(start)
	return &Answer{Results: []verdict.Result{r}, hold: hold, req: req, route: "verify"}, w, nil
}

type fleetAnswer struct {
	r   verdict.Result
	err error
}

// askFleet admits one email that needs the worker fleet and returns the fleet's result with the
// request's hold, which the caller settles. When the account's last admission in this process
// left room, the fleet is asked while Postgres admits, so the admission's commit overlaps the wait
// for the mail server instead of adding to it; if admission then refuses, the answer is dropped
// unseen and nothing is charged. Without room, or with no recent decision, admission comes first:
// a throttled or exhausted account never makes the fleet work.
func (s *Service) askFleet(ctx context.Context, who Caller, email string) (verdict.Result, *usage.Hold, Window, error) {
	if !s.fleet.Up() {
		return verdict.Result{}, nil, Window{}, unavailable(queue.ErrUnavailable) // at once, before anything is charged
	}
	vctx, cancel := context.WithTimeout(ctx, SyncDeadline)
	defer cancel() // also stops a fleet request whose admission was refused
	var answer chan fleetAnswer
	if s.headroom.Take(who.Account, s.now()) {
		answer = make(chan fleetAnswer, 1)
		go func() {
			r, err := s.fleet.VerifyOne(vctx, email)
			answer <- fleetAnswer{r, err}
		}()
	}
	hold, w, err := s.admit(ctx, who, 1, SyncDeadline)
	if err != nil {
		return verdict.Result{}, nil, w, err
	}
	var a fleetAnswer
	if answer != nil {
		a = <-answer
	} else {
		a.r, a.err = s.fleet.VerifyOne(vctx, email)
	}
	if a.err != nil {
		hold.Close() // nothing was delivered: the hold goes back
		return verdict.Result{}, nil, w, unavailable(a.err)
	}
	return a.r, hold, w, nil
}
