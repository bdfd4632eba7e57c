-- +goose Up
-- Metering as holds on delivery (docs/architecture.md, "Metering and admission"). Admission
-- takes room under the account's limits as a hold; usage rows are written only for results
-- delivered, each taking its unit off the hold in the same statement; what a request did not
-- deliver goes back when its hold is released, or expires.
--
-- usage_monthly.held is the month's sum of its open holds. Admission reads it, with billable and
-- quota_units, on the month row's latest version under that row's lock, so that concurrent
-- admissions on any number of replicas see each other's holds. quota_units now counts the
-- free-tier units of delivered results only.
ALTER TABLE usage_monthly ADD COLUMN held integer NOT NULL DEFAULT 0 CHECK (held >= 0);

-- One row per open hold: the units of a request, a bulk list or an asynchronous job not
-- delivered yet. A request's hold expires (expires_at) when its replica died before releasing
-- it; a list's or a job's has no expiry (it is released with the list's or the job's end, in
-- that transaction). free: the units delivered against it count toward the monthly quota.
CREATE TABLE usage_holds (
    id         uuid PRIMARY KEY,
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    month      date NOT NULL,
    units      integer NOT NULL CHECK (units >= 0),
    free       boolean NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_holds_expiry ON usage_holds (expires_at) WHERE expires_at IS NOT NULL;

-- quota_units counts delivered results only: the free-tier units that unfinished lists and jobs
-- took at their admission move to their holds below.
UPDATE usage_monthly m SET quota_units = greatest(0, m.quota_units - x.n)
FROM (SELECT account_id, quota_month AS month, sum(least(quota_units, greatest(0, unique_addresses - verified)))::int AS n
      FROM lists WHERE state IN ('queued', 'running') GROUP BY 1, 2) x
WHERE m.account_id = x.account_id AND m.month = x.month;
UPDATE usage_monthly m SET quota_units = greatest(0, m.quota_units - x.n)
FROM (SELECT j.account_id, date_trunc('month', j.created_at AT TIME ZONE 'UTC')::date AS month, count(*)::int AS n
      FROM jobs j JOIN accounts a ON a.id = j.account_id
      WHERE a.tier = 'free' AND j.state IN ('pending', 'processing', 'retrying') GROUP BY 1, 2) x
WHERE m.account_id = x.account_id AND m.month = x.month;

-- The work in flight when this runs owns holds from now on: every unfinished bulk list its
-- addresses still to verify, every unfinished asynchronous job its email (ids: the list's, the
-- job's), in the current month.
INSERT INTO usage_holds (id, account_id, month, units, free)
SELECT l.id, l.account_id, date_trunc('month', now() AT TIME ZONE 'UTC')::date, greatest(0, l.unique_addresses - l.verified),
    a.tier = 'free'
FROM lists l JOIN accounts a ON a.id = l.account_id WHERE l.state IN ('queued', 'running');
INSERT INTO usage_holds (id, account_id, month, units, free)
SELECT j.id, j.account_id, date_trunc('month', now() AT TIME ZONE 'UTC')::date, 1, a.tier = 'free'
FROM jobs j JOIN accounts a ON a.id = j.account_id WHERE j.state IN ('pending', 'processing', 'retrying');
INSERT INTO usage_monthly AS m (account_id, month, held)
SELECT account_id, month, sum(units)::int FROM usage_holds GROUP BY 1, 2
ON CONFLICT (account_id, month) DO UPDATE SET held = m.held + EXCLUDED.held;

-- What the holds replace: rows held by replicas and their heartbeats, reservations under the
-- spend cap, refund marks, and the quota units a list took at upload.
DROP TABLE usage_reservations;
DROP TABLE usage_refunds;
DROP TABLE api_replicas;
DROP INDEX usage_log_held;
ALTER TABLE usage_log DROP COLUMN held_by;
ALTER TABLE usage_monthly DROP COLUMN reserved;
ALTER TABLE lists DROP COLUMN quota_units, DROP COLUMN quota_month;

-- +goose Down
ALTER TABLE lists ADD COLUMN quota_units integer NOT NULL DEFAULT 0,
    ADD COLUMN quota_month date NOT NULL DEFAULT date_trunc('month', now())::date;
ALTER TABLE usage_monthly ADD COLUMN reserved integer NOT NULL DEFAULT 0;
ALTER TABLE usage_log ADD COLUMN held_by uuid;
CREATE INDEX usage_log_held ON usage_log (held_by) WHERE held_by IS NOT NULL;
CREATE TABLE api_replicas (
    id          uuid PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL
);
CREATE TABLE usage_refunds (
    id         uuid PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE usage_reservations (
    id         uuid PRIMARY KEY,
    account_id uuid NOT NULL,
    month      date NOT NULL,
    emails     integer NOT NULL CHECK (emails >= 0),
    held_by    uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_reservations_created ON usage_reservations (created_at);
CREATE INDEX usage_reservations_account ON usage_reservations (account_id, month);
DROP TABLE usage_holds;
ALTER TABLE usage_monthly DROP COLUMN held;
