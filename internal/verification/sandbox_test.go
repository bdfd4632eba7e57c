package verification_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verification"
)

// A sandbox caller is answered by the sandbox on every kind of request, with no worker running
// and nothing held or billed; its stream written to a client that went away gives nothing back
// and is told undelivered; the sandbox rate window, not the plan's, admits it.
func TestSandboxCallerIsNeverBilled(t *testing.T) {
	t.Parallel()
	svc, pool, who := service(t) // no verifier worker: a fleet request would fail
	who.Sandbox = true
	ctx := context.Background()
	req := func(key string) verification.Request { return verification.Request{Caller: who, Key: key} }

	a, w, err := svc.One(ctx, req("one"), "mailbox_full@sandbox.mailvet.test")
	if err != nil || len(a.Results) != 1 || a.Results[0].Reason != verdict.ReasonMailboxFull || !a.Results[0].Sandbox {
		t.Fatalf("One: %+v, %v", a, err)
	}
	if w.Limit != verification.DefaultSandboxRatePerMin || !w.RemainingKnown || w.Remaining != verification.DefaultSandboxRatePerMin-1 {
		t.Errorf("window %+v", w)
	}
	a.Deliver()
	a.Close()

	emails := make([]string, 30) // three times the plan's rate limit of 10
	for i := range emails {
		emails[i] = "accepted+" + string(rune('a'+i%26)) + "@sandbox.mailvet.test"
	}
	b, _, err := svc.Batch(ctx, req("batch"), emails)
	if err != nil || len(b.Results) != len(emails) || b.Results[0].Status != verdict.StatusDeliverable {
		t.Fatalf("Batch: %v", err)
	}
	b.Deliver()
	b.Close()

	st, _, err := svc.StartStream(ctx, req("stream"), []string{"ann@example.com", "not-an-address"})
	if err != nil {
		t.Fatal(err)
	}
	var got []verification.Line
	undelivered, cause := st.Run(func(ls []verification.Line) (int, error) { got = append(got, ls...); return len(ls), nil })
	if undelivered != nil || cause != nil || len(got) != 2 || got[0].Result.Reason != verdict.ReasonSandboxUnlisted || got[1].Result.Reason != verdict.ReasonInvalidSyntax {
		t.Fatalf("stream: %v, %v, %+v", undelivered, cause, got)
	}
	st, _, err = svc.StartStream(ctx, req("gone"), []string{"a@example.com", "b@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	undelivered, cause = st.Run(func([]verification.Line) (int, error) { return 0, errors.New("client gone") })
	if len(undelivered) != 2 || cause != nil {
		t.Errorf("a stream whose client went away: %v, %v", undelivered, cause)
	}

	var n int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage_log) + (SELECT count(*) FROM usage_holds)
		+ (SELECT count(*) FROM rate_windows) + (SELECT count(*) FROM usage_monthly)`).Scan(&n), "metering rows")
	if n != 0 {
		t.Errorf("%d metering rows, want none", n)
	}
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT used FROM sandbox_rate_windows WHERE account_id = $1`, who.Account).Scan(&n), "sandbox window")
	if n != 1+len(emails)+2+2 {
		t.Errorf("sandbox window used %d", n)
	}

	// A request larger than the whole sandbox window is refused as the live limit refuses it.
	big := make([]string, 6)
	for i := range big {
		big[i] = "x@example.com"
	}
	small := verification.New(verification.Config{Pool: pool, SandboxRatePerMin: 5})
	if _, _, err := small.StartStream(ctx, req("big"), big); !isRateLimited(err, 5) {
		t.Errorf("6 emails against a sandbox limit of 5: %v", err)
	}
}

func isRateLimited(err error, limit int) bool {
	var rl *usage.RateLimited
	return errors.As(err, &rl) && rl.Limit == limit && rl.Asked > limit
}
