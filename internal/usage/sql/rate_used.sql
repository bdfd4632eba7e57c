-- rate_used: what account $1 has used of the rate window that starts at $2.
SELECT used FROM rate_windows WHERE account_id = $1 AND window_start = $2
