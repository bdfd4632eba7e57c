-- prune_rate_windows: rate windows that started before $1, which no request reads again.
DELETE FROM rate_windows WHERE window_start < $1
