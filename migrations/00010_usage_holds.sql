-- +goose Up
-- Usage rows an API replica wrote for a request stay held by that replica until the request's
-- result reached the client (docs/api.md, "Metering"; docs/reliability.md, "Usage of a replica
-- that died"). The replica confirms delivered rows in batches; the rows a dead replica still
-- holds are withdrawn by the sweep that every replica runs, so a result that never left a
-- killed process is not billed.

-- held_by: the API replica (api_replicas.id) that wrote the row and has not yet confirmed its
-- delivery; null for a delivered row and for every row a worker writes. No foreign key: a
-- replica's row is deleted only once it holds nothing, and the key check would add a lookup to
-- every metered insert.
ALTER TABLE usage_log ADD COLUMN held_by uuid;

-- Only rows waiting for their confirmation are in this index: a few hundred milliseconds' worth
-- per replica, whatever the size of the log. The sweep and the confirmation read through it.
CREATE INDEX usage_log_held ON usage_log (held_by) WHERE held_by IS NOT NULL;

-- One row per running API replica: its heartbeat moves alive_until forward (the database's
-- clock, so replicas' clocks need not agree). A replica whose alive_until has passed is dead.
CREATE TABLE api_replicas (
    id          uuid PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL
);

-- +goose Down
DROP TABLE api_replicas;
DROP INDEX usage_log_held;
ALTER TABLE usage_log DROP COLUMN held_by;
