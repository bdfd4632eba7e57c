-- +goose Up
-- failures counts the attempts of a job that failed for a reason that is not an outage (a result
-- Postgres refuses, a callback body that cannot be made); the job runner fails the job once they
-- reach its limit (docs/reliability.md, "Asynchronous jobs that keep failing"). An outage never
-- counts.
--
-- Safe for a rolling upgrade: a constant default adds the column without rewriting the table, and
-- runners of the previous version neither read nor write it.
ALTER TABLE jobs ADD COLUMN failures integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE jobs DROP COLUMN failures;
