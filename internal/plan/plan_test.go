package plan_test

import (
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

func TestParseTier(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"free", "builder", "scale"} {
		if tier, err := plan.ParseTier(s); err != nil || string(tier) != s {
			t.Errorf("ParseTier(%q) = %q, %v", s, tier, err)
		}
	}
	if _, err := plan.ParseTier("enterprise"); err == nil {
		t.Error("ParseTier(enterprise) succeeded")
	}
}

// The published plans, and the names operators set them by.
func TestDefaultsAndVariableNames(t *testing.T) {
	t.Parallel()
	d := plan.Defaults()
	if d.Of(plan.Free) != (plan.Limits{MonthlyCalls: 500, RateLimitPerMin: 10, MaxKeys: 2}) ||
		d.Of(plan.Builder) != (plan.Limits{MonthlyCalls: 5000, RateLimitPerMin: 100, MaxKeys: 5, OverageEUR: 0.004}) ||
		d.Of(plan.Scale) != (plan.Limits{MonthlyCalls: 100000, RateLimitPerMin: 1000, MaxKeys: 10, OverageEUR: 0.002}) {
		t.Errorf("defaults %+v", d)
	}
	var names []string
	for _, v := range plan.Variables {
		for _, tier := range v.Tiers {
			names = append(names, v.Name(tier))
		}
	}
	want := []string{
		"MAILVET_PLAN_FREE_MONTHLY_CALLS", "MAILVET_PLAN_BUILDER_MONTHLY_CALLS", "MAILVET_PLAN_SCALE_MONTHLY_CALLS",
		"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN", "MAILVET_PLAN_BUILDER_RATE_LIMIT_PER_MIN", "MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN",
		"MAILVET_PLAN_FREE_MAX_KEYS", "MAILVET_PLAN_BUILDER_MAX_KEYS", "MAILVET_PLAN_SCALE_MAX_KEYS",
		"MAILVET_OVERAGE_EUR_BUILDER", "MAILVET_OVERAGE_EUR_SCALE",
	}
	if len(names) != len(want) {
		t.Fatalf("variables %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("variable %d is %s, want %s", i, names[i], want[i])
		}
	}
}
