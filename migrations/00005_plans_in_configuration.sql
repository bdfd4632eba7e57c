-- +goose Up
-- Plans live in the process configuration only (package plan: defaults overridden by
-- MAILVET_PLAN_* and MAILVET_OVERAGE_EUR_*). The plans table mirrored it, rewritten by every
-- process at start-up, and two sources of the same limits could disagree; key limits are now
-- checked with the configured maximum. What the table still gave, the list of valid tiers,
-- becomes a check on accounts.
ALTER TABLE accounts DROP CONSTRAINT accounts_tier_fkey;
ALTER TABLE accounts ADD CONSTRAINT accounts_tier_check CHECK (tier IN ('free', 'builder', 'scale'));
DROP TABLE plans;

-- +goose Down
CREATE TABLE plans (
    tier               text PRIMARY KEY CHECK (tier IN ('free', 'builder', 'scale')),
    monthly_calls      integer NOT NULL CHECK (monthly_calls >= 0),
    rate_limit_per_min integer NOT NULL CHECK (rate_limit_per_min > 0),
    max_keys           integer NOT NULL CHECK (max_keys > 0),
    overage_eur        numeric(12, 6) NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
INSERT INTO plans (tier, monthly_calls, rate_limit_per_min, max_keys, overage_eur) VALUES
    ('free', 500, 10, 2, 0),
    ('builder', 5000, 100, 5, 0.004),
    ('scale', 100000, 1000, 10, 0.002);
ALTER TABLE accounts DROP CONSTRAINT accounts_tier_check;
ALTER TABLE accounts ADD CONSTRAINT accounts_tier_fkey FOREIGN KEY (tier) REFERENCES plans (tier);
