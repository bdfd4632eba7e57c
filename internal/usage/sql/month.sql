-- month: the month $2's counts of account $1 (zeros when it has none): free-tier units of
-- delivered results, billable results, units held by open holds.
SELECT coalesce(max(quota_units), 0), coalesce(max(billable), 0), coalesce(max(held), 0)
FROM usage_monthly WHERE account_id = $1 AND month = $2
