-- +goose Up
-- A job whose probe was greylisted waits for a re-probe in the new state 'retrying': the JOBS
-- message is redelivered at next_attempt_at (NakWithDelay), retries counts the re-probes
-- scheduled, and retrying_since is when the first greylisting reply came, the start of the
-- window (MAILVET_GREYLIST_WINDOW) after which the job completes with the greylisted result.
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('pending', 'processing', 'retrying', 'completed', 'failed'));
ALTER TABLE jobs ADD COLUMN retries integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN next_attempt_at timestamptz;
ALTER TABLE jobs ADD COLUMN retrying_since timestamptz;

-- +goose Down
UPDATE jobs SET state = 'processing' WHERE state = 'retrying';
ALTER TABLE jobs DROP COLUMN retrying_since;
ALTER TABLE jobs DROP COLUMN next_attempt_at;
ALTER TABLE jobs DROP COLUMN retries;
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('pending', 'processing', 'completed', 'failed'));
