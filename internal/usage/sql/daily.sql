-- daily: billable results of account $1 per UTC day for the $3 days up to $2, oldest first,
-- days without any included as zero.
SELECT to_char(g.day, 'YYYY-MM-DD'), coalesce(d.billable, 0)
FROM generate_series($2::date - ($3::int - 1), $2::date, interval '1 day') AS g(day)
LEFT JOIN usage_daily d ON d.account_id = $1 AND d.day = g.day::date
ORDER BY g.day
