-- +goose Up
-- The paid admission counts an account's async jobs not finished yet against its spend cap
-- (internal/usage, jobsOutstanding). Unfinished jobs are a sliver of a table that keeps every
-- job; a partial index keeps that count to them.
CREATE INDEX jobs_account_unfinished ON jobs (account_id) WHERE state IN ('pending', 'processing', 'retrying');

-- +goose Down
DROP INDEX jobs_account_unfinished;
