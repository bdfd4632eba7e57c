// Package plan owns Mailvet's plans: the tiers, the limits and overage price of each, their
// defaults, the environment variables that override them, and their look-up.
//
// The process configuration is the one source of truth (docs/operations.md, "Configuration"):
// config.Load reads Variables into a Catalog, and admission, the account and key routes, the key
// limit and the usage summary all look limits up in that Catalog. Nothing stores a copy (no table
// mirrors the plans; migration 00005 drops the one that did), so replicas cannot disagree about a
// limit. Adding a limit means a field of Limits, its default, an entry in Variables and the Limits
// schema of the OpenAPI document; nothing else.
package plan

import (
	"fmt"
	"math"
)

// Tier is an account's plan.
type Tier string

// The tiers, in ascending order of price.
const (
	Free    Tier = "free"
	Builder Tier = "builder"
	Scale   Tier = "scale"
)

// Tiers lists the tiers in ascending order.
var Tiers = []Tier{Free, Builder, Scale}

// ParseTier returns the tier named s, or an error for anything else.
func ParseTier(s string) (Tier, error) {
	for _, t := range Tiers {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown tier %q (want free, builder or scale)", s)
}

// Limits are the limits and price of one tier. The JSON is the account's `limits` object.
type Limits struct {
	// MonthlyCalls is the included volume: verification units per UTC month on free, billable
	// verifications per month on paid tiers.
	MonthlyCalls    int `json:"monthly_calls"`
	RateLimitPerMin int `json:"rate_limit_per_min"`
	MaxKeys         int `json:"max_keys"`
	// OverageEUR is the price of one billable verification over MonthlyCalls (0 on free, which
	// has a hard quota instead).
	OverageEUR float64 `json:"-"`
}

// Catalog is every tier's limits.
type Catalog map[Tier]Limits

// Of returns tier's limits; an unknown tier has none (zero limits refuse everything).
func (c Catalog) Of(t Tier) Limits { return c[t] }

// MaxKeys is the most active standard keys tier allows.
func (c Catalog) MaxKeys(t Tier) int { return c[t].MaxKeys }

// Defaults are the published plans: free 10 a minute, 2 keys, 500 units a month; builder 100 a
// minute, 5 keys, 5,000 billable a month at €0.004 over; scale 1,000 a minute, 10 keys, 100,000
// billable a month at €0.002 over.
func Defaults() Catalog {
	return Catalog{
		Free:    {MonthlyCalls: 500, RateLimitPerMin: 10, MaxKeys: 2},
		Builder: {MonthlyCalls: 5000, RateLimitPerMin: 100, MaxKeys: 5, OverageEUR: 0.004},
		Scale:   {MonthlyCalls: 100000, RateLimitPerMin: 1000, MaxKeys: 10, OverageEUR: 0.002},
	}
}

// Variable is one environment variable that overrides a limit of every tier it applies to:
// MAILVET_PLAN_<TIER>_<Suffix> for the counted limits, MAILVET_OVERAGE_EUR_<TIER> for prices.
type Variable struct {
	// Name is the variable's name for tier.
	Name func(t Tier) string
	// Tiers it applies to.
	Tiers []Tier
	// Int is set for a whole-number limit: a pointer into l, and the bounds.
	Int      func(l *Limits) *int
	Min, Max int
	// Price is set for a price: a pointer into l.
	Price func(l *Limits) *float64
}

func planVar(suffix string) func(Tier) string {
	return func(t Tier) string { return "MAILVET_PLAN_" + upper(t) + "_" + suffix }
}

// Variables are every variable that overrides a limit, for config.Load.
var Variables = []Variable{
	{Name: planVar("MONTHLY_CALLS"), Tiers: Tiers, Int: func(l *Limits) *int { return &l.MonthlyCalls }, Min: 0, Max: math.MaxInt32},
	{Name: planVar("RATE_LIMIT_PER_MIN"), Tiers: Tiers, Int: func(l *Limits) *int { return &l.RateLimitPerMin }, Min: 1, Max: math.MaxInt32},
	{Name: planVar("MAX_KEYS"), Tiers: Tiers, Int: func(l *Limits) *int { return &l.MaxKeys }, Min: 1, Max: 10000},
	{Name: func(t Tier) string { return "MAILVET_OVERAGE_EUR_" + upper(t) }, Tiers: []Tier{Builder, Scale},
		Price: func(l *Limits) *float64 { return &l.OverageEUR }},
}

func upper(t Tier) string {
	b := []byte(t)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
