-- +goose Up
-- An upgrade opening a Checkout session claims the account for the time its Stripe call may take,
-- instead of holding the account's row lock across that call: a slow Stripe no longer blocks the
-- account's other writes (keys, spend cap, Stripe's webhooks), and a second upgrade meanwhile
-- waits for the session the first one opens (docs/dashboard.md, "Billing").
ALTER TABLE accounts ADD COLUMN checkout_claimed_until timestamptz;

-- +goose Down
ALTER TABLE accounts DROP COLUMN checkout_claimed_until;
