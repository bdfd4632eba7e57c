-- +goose Up
-- The webhook outbox sweep (every 10 s on every webhook worker) also re-publishes retrying
-- deliveries whose next attempt is long overdue: their message was lost (a NATS store wiped), and
-- without the sweep they would stay retrying forever. Retrying deliveries are only those waiting
-- out a backoff of a few seconds, a sliver of a table that keeps 30 days of deliveries; a partial
-- index keeps that scan to them.
CREATE INDEX deliveries_retrying ON deliveries (updated_at) WHERE state = 'retrying';

-- +goose Down
DROP INDEX deliveries_retrying;
