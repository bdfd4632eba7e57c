-- prune_rate_windows: rate windows that started before $1, which no request reads again; the
-- sandbox keys' windows (docs/sandbox.md) with them.
WITH sandbox AS (DELETE FROM sandbox_rate_windows WHERE window_start < $1)
DELETE FROM rate_windows WHERE window_start < $1
