-- +goose Up
-- Every subscription Stripe has told Mailvet about, with its newest event applied, so that
-- events are ordered per subscription and an account follows the best of its customer's
-- subscriptions rather than whichever an event last named (internal/billing, Events;
-- docs/api.md, "Stripe webhook"). A customer no account has yet keeps its subscriptions here
-- until a completed Checkout links it.
CREATE TABLE stripe_subscriptions (
    id          text PRIMARY KEY CHECK (length(id) <= 255),
    customer_id text NOT NULL CHECK (length(customer_id) <= 255),
    status      text NOT NULL CHECK (length(status) <= 255),
    paying      boolean NOT NULL,
    tier        text CHECK (tier IN ('free', 'builder', 'scale')), -- NULL: a price Mailvet does not sell
    event_at    timestamptz NOT NULL,
    object      jsonb NOT NULL -- the subscription as its newest event carried it
);
CREATE INDEX stripe_subscriptions_customer ON stripe_subscriptions (customer_id);

-- The subscription each account has on record, as it stands: the only one known until now.
INSERT INTO stripe_subscriptions (id, customer_id, status, paying, tier, event_at, object)
SELECT stripe_subscription_id, stripe_customer_id, coalesce(subscription_status, ''),
       coalesce(subscription_status IN ('active', 'trialing', 'past_due'), false),
       CASE WHEN tier <> 'free' THEN tier END,
       coalesce(billing_event_at, updated_at),
       jsonb_strip_nulls(jsonb_build_object(
           'id', stripe_subscription_id, 'object', 'subscription', 'customer', stripe_customer_id,
           'status', subscription_status,
           'current_period_start', extract(epoch FROM current_period_start)::bigint,
           'current_period_end', extract(epoch FROM current_period_end)::bigint,
           'cancel_at_period_end', cancel_at_period_end,
           'canceled_at', extract(epoch FROM canceled_at)::bigint,
           'cancel_at', extract(epoch FROM cancel_at)::bigint,
           'trial_start', extract(epoch FROM trial_start)::bigint,
           'trial_end', extract(epoch FROM trial_end)::bigint,
           'billing_cycle_anchor', extract(epoch FROM billing_cycle_anchor)::bigint))
FROM accounts
WHERE stripe_subscription_id IS NOT NULL AND stripe_customer_id IS NOT NULL
ON CONFLICT (id) DO NOTHING;

-- +goose Down
DROP TABLE stripe_subscriptions;
