-- expire: the only sweep. Deletes a batch of holds whose lifetime has passed (their replica died
-- before releasing them, or could not reach Postgres to) and gives their units back to the
-- month's held count. $1 the batch size. SKIP LOCKED: sweeps on several replicas take different
-- holds, and a hold being billed right now is left for the next sweep.
--
-- The month rows are locked in account order before they are updated, as admission groups and
-- bills take them (docs/architecture.md, "Metering and admission"): the update's own order is
-- the join's, and a sweep that took them in another order could deadlock with an admission
-- group holding some of them.
WITH gone AS (
    DELETE FROM usage_holds WHERE id IN (
        SELECT id FROM usage_holds WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED)
    RETURNING account_id, month, units
), x AS (
    SELECT account_id, month, sum(units)::int AS n, count(*) AS holds FROM gone GROUP BY 1, 2
), locked AS MATERIALIZED (
    SELECT m.account_id, m.month FROM usage_monthly m JOIN x USING (account_id, month)
    ORDER BY m.account_id, m.month
    FOR UPDATE OF m
)
UPDATE usage_monthly m SET held = greatest(0, m.held - x.n)
FROM x JOIN locked l USING (account_id, month)
WHERE m.account_id = x.account_id AND m.month = x.month
RETURNING x.holds
