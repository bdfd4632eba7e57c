-- +goose NO TRANSACTION
-- +goose Up
-- An account's deletion stops the callbacks still to be sent in its first, short transaction
-- (internal/privacy, eraseSmall; docs/personal-data.md, "Deleting an account"). They are a
-- sliver of a delivery log that keeps up to 30 days; a partial index finds them without reading
-- the account's finished deliveries.
--
-- No transaction: the index is built CONCURRENTLY, so that building it over a large deliveries
-- table does not stop webhook workers and finishing jobs from writing for the length of the
-- build. A concurrent build that failed leaves an invalid index that IF NOT EXISTS would keep:
-- drop it (DROP INDEX CONCURRENTLY deliveries_account_unfinished) and migrate again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_account_unfinished ON deliveries (account_id)
    WHERE state IN ('pending', 'retrying');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS deliveries_account_unfinished;
