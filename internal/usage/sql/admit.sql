-- admit: the admission statement (docs/architecture.md, "Metering and admission"). In order:
-- the rate window, then the month's limit, then the hold.
--
-- $1 account, $2 rate window start, $3 units, $4 rate limit (NULL: the request is not rate
-- limited), $5 month, $6 free tier, $7 monthly calls (the free quota, or the calls included in a
-- paid plan), $8 overage price, $9 hold id, $10 hold lifetime (NULL: owned by a list or a job).
--
-- The rate window takes the units only if it stays within the limit; a request larger than the
-- whole limit never passes. Its units are spent even when the month then refuses.
--
-- The month's limit is checked on the month row's latest version, after waiting for the row
-- lock of any admission in flight (ON CONFLICT's condition), against what is billed plus what
-- is held plus this request: the free quota (quota_units + held + units <= calls), or the hard
-- spend cap with every email of the request billable, unrounded (billable + held + units past
-- the included calls, times the price, <= cap). Accounts without a cap always fit. Admitted, the
-- units join the month's held count and the hold is inserted.
WITH r AS (
    INSERT INTO rate_windows AS w (account_id, window_start, used)
    SELECT $1, $2, $3::int WHERE $4::int IS NOT NULL AND $3::int <= $4::int
    ON CONFLICT (account_id, window_start)
    DO UPDATE SET used = w.used + EXCLUDED.used WHERE w.used + EXCLUDED.used <= $4::int
    RETURNING used
), rate AS (
    SELECT used FROM r UNION ALL SELECT 0 WHERE $4::int IS NULL
), acct AS (
    SELECT a.hard_cap_eur::float8 AS cap FROM accounts a WHERE a.id = $1
), month AS (
    INSERT INTO usage_monthly AS m (account_id, month, held)
    SELECT $1, $5, $3::int FROM acct
    WHERE EXISTS (SELECT 1 FROM rate) AND CASE WHEN $6::bool THEN $3::int <= $7::int
        ELSE acct.cap IS NULL OR greatest(0, $3::int - $7::int)::float8 * $8::float8 <= acct.cap + 1e-9 END
    ON CONFLICT (account_id, month) DO UPDATE SET held = m.held + EXCLUDED.held
    WHERE CASE WHEN $6::bool THEN m.quota_units + m.held + $3::int <= $7::int
        ELSE (SELECT cap FROM acct) IS NULL
            OR greatest(0, m.billable + m.held + $3::int - $7::int)::float8 * $8::float8 <= (SELECT cap FROM acct) + 1e-9 END
    RETURNING quota_units, billable, held
), hold AS (
    INSERT INTO usage_holds (id, account_id, month, units, free, expires_at)
    SELECT $9, $1, $5, $3::int, $6::bool, now() + $10::interval FROM month
), now_month AS (
    SELECT quota_units, billable, held FROM month
    UNION ALL
    SELECT quota_units, billable, held FROM usage_monthly
    WHERE account_id = $1 AND month = $5 AND NOT EXISTS (SELECT 1 FROM month)
)
SELECT (SELECT used FROM rate), (SELECT cap FROM acct), EXISTS (SELECT 1 FROM month),
    coalesce((SELECT quota_units FROM now_month), 0), coalesce((SELECT billable FROM now_month), 0),
    coalesce((SELECT held FROM now_month), 0)
