package webhook

import (
	"errors"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

// Only paid tiers may replay deliveries; the API and the dashboard both ask ReplayAllowed.
func TestReplayAllowedOnPaidTiersOnly(t *testing.T) {
	t.Parallel()
	if err := ReplayAllowed(plan.Free); !errors.Is(err, ErrReplayNeedsPaidPlan) {
		t.Fatalf("free: %v", err)
	}
	for _, tier := range []plan.Tier{plan.Builder, plan.Scale} {
		if err := ReplayAllowed(tier); err != nil {
			t.Fatalf("%s: %v", tier, err)
		}
	}
}
