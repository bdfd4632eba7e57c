-- +goose Up
-- The job sweep (every 15 s on every verifier replica) looks for unfinished jobs only; finished
-- ones are nearly all of the table. A partial index keeps that scan to the few that matter.
CREATE INDEX jobs_unfinished ON jobs (state, created_at)
    WHERE state IN ('pending', 'processing', 'retrying');

-- +goose Down
DROP INDEX jobs_unfinished;
