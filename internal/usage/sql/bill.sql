-- bill: usage rows of delivered results, written against their holds (docs/architecture.md,
-- "Metering and admission"). One statement for any number of holds, of any accounts: a Ledger
-- bills a whole batch of requests with it.
--
-- $1–$12 the rows' columns (arrays, in the order of the columns below), $13 each row's hold (a
-- NULL element: a row that belongs to no hold, such as a refused request's, which counts
-- nothing), $14 the holds, $15 for each of them whether it is released: its owner ended (the
-- request, the list or the job).
--
-- A row whose item key is logged already is skipped: an item is billed once. Each row logged
-- moves one unit of its hold from held to billed, in this statement: the month's billable count
-- (the row is billable) and, on a free hold, its quota_units (the row is a quota unit) grow as
-- its held count shrinks. A released hold is deleted and the rest of its units leave the held
-- count. Rows of a hold that is gone (it expired: its replica was taken for dead) are not
-- written: their units were given back already, and a result is never billed outside its hold.
-- Results are billed in the month of their hold (the month their request was admitted in) and
-- counted on their day in usage_daily.
--
-- Locks are taken in one order in every metering statement: usage_holds, then usage_monthly,
-- then usage_daily; rows of several accounts in account order, as admission groups take them.
WITH asked AS (
    SELECT * FROM unnest($14::uuid[], $15::bool[]) AS a(id, release)
), hold AS (
    SELECT h.id, h.account_id, h.month, h.units, h.free, a.release
    FROM usage_holds h JOIN asked a ON a.id = h.id
    ORDER BY h.account_id, h.id
    FOR UPDATE OF h
), input AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::bool[], $11::bool[], $12::jsonb[], $13::uuid[])
        AS i(account_id, key_id, item_key, occurred_at, route, email_domain, status, failed_check,
            error_class, billable, quota_unit, snapshot, hold)
    WHERE i.hold IS NULL OR i.hold IN (SELECT id FROM hold)
), ins AS (
    INSERT INTO usage_log (account_id, key_id, item_key, occurred_at, route, email_domain, status,
        failed_check, error_class, billable, quota_unit, snapshot)
    SELECT account_id, key_id, item_key, occurred_at, route, email_domain, status, failed_check,
        error_class, billable, quota_unit, snapshot
    FROM input ORDER BY account_id
    ON CONFLICT (item_key) DO NOTHING
    RETURNING item_key
), logged AS (
    SELECT i.account_id, (i.occurred_at AT TIME ZONE 'UTC')::date AS day, i.billable, i.quota_unit, i.hold
    FROM ins JOIN input i USING (item_key)
), took AS (
    SELECT h.id, h.account_id, h.month, h.free, h.release,
        CASE WHEN h.release THEN h.units
            ELSE least(h.units, (SELECT count(*) FROM logged l WHERE l.hold = h.id)::int) END AS n
    FROM hold h
), kept AS (
    UPDATE usage_holds u SET units = u.units - t.n FROM took t
    WHERE u.id = t.id AND NOT t.release AND t.n > 0
), released AS (
    DELETE FROM usage_holds u USING took t WHERE u.id = t.id AND t.release
), daily AS (
    INSERT INTO usage_daily AS d (account_id, day, billable)
    SELECT account_id, day, count(*) FROM logged WHERE billable GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (account_id, day) DO UPDATE SET billable = d.billable + EXCLUDED.billable
)
INSERT INTO usage_monthly AS m (account_id, month, billable, quota_units, held)
SELECT account_id, month, sum(b)::int, sum(q)::int, sum(h)::int FROM (
    SELECT l.account_id, coalesce(t.month, date_trunc('month', l.day)::date) AS month,
        l.billable::int AS b, (l.quota_unit AND coalesce(t.free, false))::int AS q, 0 AS h
    FROM logged l LEFT JOIN took t ON t.id = l.hold
    UNION ALL
    SELECT account_id, month, 0, 0, n FROM took
) x GROUP BY 1, 2 HAVING sum(b) > 0 OR sum(q) > 0 OR sum(h) > 0
ORDER BY 1, 2
ON CONFLICT (account_id, month) DO UPDATE SET billable = m.billable + EXCLUDED.billable,
    quota_units = m.quota_units + EXCLUDED.quota_units, held = greatest(0, m.held - EXCLUDED.held)
