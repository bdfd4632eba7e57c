-- +goose NO TRANSACTION
-- +goose Up
-- Personal data kept the least time (docs/personal-data.md).
--
-- No transaction: the indexes are built CONCURRENTLY, so that building them over a large
-- usage_log does not stop the metering writes for the length of the build. Every statement can
-- run again (IF NOT EXISTS). A concurrent build that failed leaves an invalid index that IF NOT
-- EXISTS would keep: drop it (DROP INDEX CONCURRENTLY usage_log_snapshots) and migrate again.
--
-- accounts.deleted_at: the account was deleted by its owner (DELETE /v1/management/account, or
-- the dashboard's data page). Its row stays as an anonymous tombstone (no email, no checkout),
-- so that the billing counts in usage_monthly and usage_daily keep their key and work in flight
-- at the deletion finds the account gone instead of failing on a foreign key; every other row of
-- the account is deleted.
ALTER TABLE accounts ADD COLUMN IF NOT EXISTS deleted_at timestamptz;
-- accounts.erased_at: the deleted account's lists, jobs, deliveries and usage rows, deleted in
-- batches after the deletion (privacy.Erase), are all gone. Until then the retention loop goes
-- on erasing it; it also sweeps the accounts deleted in the last day for rows that work in
-- flight wrote after the deletion.
ALTER TABLE accounts ADD COLUMN IF NOT EXISTS erased_at timestamptz;
CREATE INDEX CONCURRENTLY IF NOT EXISTS accounts_deleted ON accounts (deleted_at) WHERE deleted_at IS NOT NULL;

-- jobs.expired_at: a finished job's email, result and webhook secret were removed by retention
-- (MAILVET_JOB_RETENTION); its id, state and timestamps stay so that GET of the job says so.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expired_at timestamptz;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_to_expire ON jobs (completed_at)
    WHERE expired_at IS NULL AND state IN ('completed', 'failed');

-- Result snapshots are kept MAILVET_RESULT_RETENTION: the retention loop clears them by age.
-- Only rows still holding a snapshot are in this index, so the loop's scan stays small however
-- long the log.
CREATE INDEX CONCURRENTLY IF NOT EXISTS usage_log_snapshots ON usage_log (occurred_at) WHERE snapshot IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS usage_log_snapshots;
DROP INDEX CONCURRENTLY IF EXISTS jobs_to_expire;
ALTER TABLE jobs DROP COLUMN IF EXISTS expired_at;
DROP INDEX CONCURRENTLY IF EXISTS accounts_deleted;
ALTER TABLE accounts DROP COLUMN IF EXISTS erased_at;
ALTER TABLE accounts DROP COLUMN IF EXISTS deleted_at;
