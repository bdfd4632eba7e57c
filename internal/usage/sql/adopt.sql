-- adopt: the hold $1 is owned from now on by an asynchronous job of the same id, whose end
-- releases it: it no longer expires.
UPDATE usage_holds SET expires_at = NULL WHERE id = $1
