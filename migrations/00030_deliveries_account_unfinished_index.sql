-- +goose Up
-- An account's deletion stops the callbacks still to be sent in its first, short transaction
-- (internal/privacy, eraseSmall; docs/personal-data.md, "Deleting an account"). They are a
-- sliver of a delivery log that keeps up to 30 days; a partial index finds them without reading
-- the account's finished deliveries.
CREATE INDEX deliveries_account_unfinished ON deliveries (account_id) WHERE state IN ('pending', 'retrying');

-- +goose Down
DROP INDEX deliveries_account_unfinished;
