-- +goose Up
-- Webhook delivery (issue 6): indexes for the outbox sweep, the delivery log's keyset pagination
-- and retention, and the rule that an original delivery has at most one replay that is not failed.

-- The sweep looks for deliveries that were committed but never attempted (the verifier stopped
-- between its commit and its publish).
CREATE INDEX deliveries_unattempted ON deliveries (updated_at) WHERE state = 'pending' AND attempts = 0;

-- The delivery log lists an account's deliveries newest first, with id as the tie-breaker of the
-- keyset cursor.
CREATE INDEX deliveries_account_created_id ON deliveries (account_id, created_at DESC, id DESC);

-- Retention deletes finished deliveries by age.
CREATE INDEX deliveries_finished ON deliveries (finished_at) WHERE state IN ('delivered', 'failed');

-- A replay request that arrives twice (double click, client retry) must not deliver twice: while a
-- replay of an original is pending, retrying or delivered, no second one can be inserted. A new
-- replay is possible only once every earlier one has failed.
CREATE UNIQUE INDEX deliveries_one_live_replay ON deliveries (replay_of)
    WHERE replay_of IS NOT NULL AND state <> 'failed';

-- +goose Down
DROP INDEX deliveries_one_live_replay;
DROP INDEX deliveries_finished;
DROP INDEX deliveries_account_created_id;
DROP INDEX deliveries_unattempted;
