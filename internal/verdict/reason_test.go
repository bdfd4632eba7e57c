package verdict

import "testing"

// TestEveryReasonIsListed keeps Reasons, the outcome defaults and the checks' reasons in step.
func TestEveryReasonIsListed(t *testing.T) {
	t.Parallel()
	listed := map[Reason]bool{}
	for _, r := range Reasons {
		if r == "" || listed[r] {
			t.Errorf("reason %q empty or listed twice", r)
		}
		listed[r] = true
	}
	if len(Reasons) != 23 {
		t.Errorf("%d reasons, want the 23 of docs/api.md", len(Reasons))
	}
	for o, v := range verdicts {
		if !listed[v.reason] {
			t.Errorf("outcome %d: default reason %q not listed", o, v.reason)
		}
	}
	for _, c := range []Check{CheckSyntax, CheckDisposable, CheckNoMX, CheckSMTP} {
		var r Result
		r.Fail(c, OutcomeInvalid)
		if !listed[r.Reason] || r.Reason == ReasonInternal {
			t.Errorf("check %s: reason %q", c, r.Reason)
		}
	}
}
