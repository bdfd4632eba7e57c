-- +goose Up
-- The Stripe Checkout session an upgrade from the dashboard opened, while it can still be paid
-- (docs/dashboard.md, "Billing"): a second upgrade of the account meanwhile (a double click, a
-- second tab, the return page before Stripe's webhook arrived) is sent to the same session, which
-- can complete once, instead of opening another that would start a second subscription.
ALTER TABLE accounts ADD COLUMN checkout_url text;
ALTER TABLE accounts ADD COLUMN checkout_tier text;
ALTER TABLE accounts ADD COLUMN checkout_expires_at timestamptz;

-- +goose Down
ALTER TABLE accounts DROP COLUMN checkout_expires_at;
ALTER TABLE accounts DROP COLUMN checkout_tier;
ALTER TABLE accounts DROP COLUMN checkout_url;
