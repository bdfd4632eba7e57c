package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
)

// verifyOne is POST /v1/email/verify: one address, answered synchronously, or queued as an
// asynchronous job when the request names a callback URL.
func (s *Server) verifyOne(c echo.Context) error {
	start := time.Now()
	var req verifyRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Email == nil {
		return InvalidRequest("Field email is required.")
	}
	if err := checkEmail("email", *req.Email); err != nil {
		return err
	}
	if req.WebhookURL != nil && req.CallbackURL != nil && *req.WebhookURL != *req.CallbackURL {
		return InvalidRequest("Send the callback URL once, as webhook_url (callback_url is an alias).")
	}
	hook := req.WebhookURL
	if hook == nil {
		hook = req.CallbackURL
	}
	if hook == nil && req.WebhookSecret != nil {
		return InvalidRequest("Field webhook_secret needs webhook_url.")
	}
	if hook != nil {
		return s.verifyAsync(c, *hook, req.WebhookSecret, *req.Email)
	}

	who := s.callerOf(c)
	it := who.item(c, "verify", 0)
	r, final := s.local.Local(*req.Email)
	// The usage row is written by the admission statement itself: complete when the local layers
	// decide, else with its metering facts and the verdict to follow (usage.Verdicts). Either way
	// it is durable before the response, with one commit on the request's path.
	if final {
		r.LatencyMS = elapsedMS(start)
		charge, err := s.admit(c, who, 1, usage.ResultRow(it, r, nil))
		if err != nil {
			return err
		}
		r.LatencyMS = elapsedMS(start) // end to end; the row's snapshot has the time before admission
		return s.answerOne(c, charge, r)
	}
	r, charge, err := s.askFleet(c, who, *req.Email, usage.PendingRow(it, *req.Email))
	if err != nil {
		return err
	}
	r.LatencyMS = elapsedMS(start)
	s.verdicts.Add(usage.VerdictOf(it.Key, r, nil))
	return s.answerOne(c, charge, r)
}

// answerOne writes a single result and only then settles its charge: a result that did not reach
// the client is given back (Close), and a replica killed before the write leaves its row held, for
// the other replicas' sweep to withdraw (docs/reliability.md, "Usage of a replica that died").
func (s *Server) answerOne(c echo.Context, charge *usage.Charge, r verdict.Result) error {
	defer charge.Close()
	if err := c.JSON(http.StatusOK, r); err != nil {
		return nil // the client went away before it had the result: it is not owed
	}
	charge.Settle()
	return nil
}

type fleetAnswer struct {
	r   verdict.Result
	err error
}

// askFleet admits one email that needs the worker fleet and returns the fleet's result with the
// request's charge, which the caller settles. When the account's last admission on this replica
// left room, the fleet is asked while Postgres admits, so the admission's commit overlaps the wait
// for the mail server instead of adding to it; if admission then refuses, the answer is dropped
// unseen and nothing is charged. Without room, or with no recent decision, admission comes first:
// a throttled or exhausted account never makes the fleet work.
func (s *Server) askFleet(c echo.Context, who caller, email string, logged usage.Row) (verdict.Result, *usage.Charge, error) {
	if !s.dispatch.Up() {
		return verdict.Result{}, nil, unavailable(queue.ErrUnavailable) // at once, before anything is charged
	}
	ctx := c.Request().Context()
	vctx, cancel := context.WithTimeout(ctx, syncDeadline)
	defer cancel() // also stops a fleet request whose admission was refused
	var answer chan fleetAnswer
	if s.headroom.Take(who.account, s.now()) {
		answer = make(chan fleetAnswer, 1)
		go func() {
			r, err := s.dispatch.VerifyOne(vctx, email)
			answer <- fleetAnswer{r, err}
		}()
	}
	charge, err := s.admit(c, who, 1, logged)
	if err != nil {
		return verdict.Result{}, nil, err
	}
	var a fleetAnswer
	if answer != nil {
		a = <-answer
	} else {
		a.r, a.err = s.dispatch.VerifyOne(vctx, email)
	}
	if a.err != nil {
		charge.Close() // nothing was delivered: the row, its counts and the quota unit go back
		return verdict.Result{}, nil, unavailable(a.err)
	}
	return a.r, charge, nil
}

func elapsedMS(start time.Time) float64 {
	return verify.MS(time.Since(start))
}
