package verification

import (
	"context"
	"errors"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// Window is the caller's rate window as a request left it, for the RateLimit-* headers
// (docs/api.md, "Headers").
type Window struct {
	// Known is false when admission did not run (the request was refused before it): the
	// caller reads the window itself (CurrentWindow) if it needs one.
	Known bool
	Limit int
	// Remaining is what is left of the window; RemainingKnown is false when admission got no
	// answer about it, and then it is not guessed (a 0 would make a client wait for nothing).
	Remaining      int
	RemainingKnown bool
	Reset          time.Time
	// At is when the window was read: Reset - At is the wait.
	At time.Time
}

// admit runs admission for n emails of a request whose deadline is deadline. The caller hands
// the hold it returns the rows of the results that reached the client (Deliver) and closes it,
// which gives back whatever was not delivered (usage.Ledger). The window is known whenever
// admission got as far as the rate step: also on a quota, spend-cap or datastore refusal that
// came after it.
func (s *Service) admit(ctx context.Context, who Caller, n int, deadline time.Duration) (*usage.Hold, Window, error) {
	now := s.now()
	hold, d, err := s.ledger.Admit(ctx, usage.Request{
		AccountID: who.Account, Free: who.Tier == plan.Free, Units: n,
		RatePerMin: who.Limits.RateLimitPerMin, MonthlyCalls: who.Limits.MonthlyCalls,
		OverageEUR: who.Limits.OverageEUR, Now: now, Lifetime: deadline + holdMargin,
	})
	s.headroom.Note(who.Account, now, d, err)
	w := Window{Known: true, Limit: who.Limits.RateLimitPerMin, At: now}
	var rl *usage.RateLimited
	switch {
	case errors.As(err, &rl):
		// What is left of the window: a request larger than that is refused whole, and a smaller
		// one would still pass.
		w.Remaining, w.RemainingKnown, w.Reset = max(0, rl.Limit-rl.Used), true, rl.Reset
	case err == nil || d.RateRead:
		// Past the rate step (a later step may have refused or failed): the decision has what
		// is left of the window.
		w.Remaining, w.RemainingKnown, w.Reset = d.Remaining, true, d.Reset
	default:
		// The statement got no answer: when the window ends is the clock's.
		w.Reset = usage.WindowEnd(now)
	}
	return hold, w, err
}

// CurrentWindow reads the caller's current rate window, one primary-key look-up bounded by ctx,
// for a response refused before admission ran. Remaining is left unknown if the read fails.
func (s *Service) CurrentWindow(ctx context.Context, who Caller) Window {
	now := s.now()
	if who.Sandbox {
		w := Window{Known: true, Limit: s.sandboxRate, Reset: usage.WindowEnd(now), At: now}
		if used, err := s.sandboxUsed(ctx, who.Account, now); err == nil {
			w.Remaining, w.RemainingKnown = max(0, s.sandboxRate-used), true
		}
		return w
	}
	w := Window{Known: true, Limit: who.Limits.RateLimitPerMin, Reset: usage.WindowEnd(now), At: now}
	if used, err := usage.RateUsed(ctx, s.pool, who.Account, now); err == nil {
		w.Remaining, w.RemainingKnown = max(0, who.Limits.RateLimitPerMin-used), true
	}
	return w
}

// Answer is results admitted and verified but not yet billed. The caller writes them to the
// client, then calls Deliver if they reached it, and Close in any case: a result that did not
// reach the client is not billed, and its room goes back. A process killed before Close leaves
// only the hold, which expires (docs/reliability.md, "Metering guarantees").
type Answer struct {
	Results []verdict.Result
	hold    *usage.Hold
	req     Request
	route   string
}

// Deliver bills every result of the answer, behind the response. A sandbox answer has no hold
// and bills nothing.
func (a *Answer) Deliver() {
	if a.hold == nil {
		return
	}
	rows := make([]usage.Row, len(a.Results))
	for i, r := range a.Results {
		rows[i] = usage.ResultRow(a.req.item(a.route, i), r, nil)
	}
	a.hold.Deliver(rows...)
}

// Close ends the request's hold, giving back what was not delivered.
func (a *Answer) Close() {
	if a.hold != nil {
		a.hold.Close()
	}
}
