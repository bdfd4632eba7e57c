-- +goose Up
-- idle_until is when a dashboard session ends for want of use (MAILVET_DASHBOARD_SESSION_IDLE,
-- docs/dashboard.md, "Sessions"): each request pushes it on, never past expires_at. NULL is a
-- session no request has pushed on yet (one started by a replica of the previous version during a
-- rolling upgrade): its next request sets it.
--
-- Safe for a rolling upgrade: a column without a default is added without rewriting the table,
-- and replicas of the previous version neither read nor write it.
ALTER TABLE dashboard_sessions ADD COLUMN idle_until timestamptz;
CREATE INDEX dashboard_sessions_idle ON dashboard_sessions (idle_until);

-- +goose Down
DROP INDEX dashboard_sessions_idle;
ALTER TABLE dashboard_sessions DROP COLUMN idle_until;
