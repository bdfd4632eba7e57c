-- expire: the only sweep. Deletes a batch of holds whose lifetime has passed (their replica died
-- before releasing them, or could not reach Postgres to) and gives their units back to the
-- month's held count. $1 the batch size. SKIP LOCKED: sweeps on several replicas take different
-- holds, and a hold being billed right now is left for the next sweep.
WITH gone AS (
    DELETE FROM usage_holds WHERE id IN (
        SELECT id FROM usage_holds WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING account_id, month, units
)
UPDATE usage_monthly m SET held = greatest(0, m.held - x.n)
FROM (SELECT account_id, month, sum(units)::int AS n, count(*) AS holds FROM gone GROUP BY 1, 2) x
WHERE m.account_id = x.account_id AND m.month = x.month
RETURNING x.holds
