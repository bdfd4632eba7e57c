-- +goose Up
-- Sandbox keys (docs/sandbox.md): a standard key is live (sk_live_…) or sandbox (sk_test_…).
-- A sandbox key answers from the documented magic addresses and never probes or bills; lists it
-- uploads are marked, so that the verifier workers answer their chunks the same way. Sandbox
-- requests have their own one-minute rate windows, shared by all API replicas as rate_windows
-- are, and as those unlogged: losing them in a crash only forgives the current minute.
ALTER TABLE api_keys ADD COLUMN mode text NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'sandbox'));
ALTER TABLE api_keys ADD CONSTRAINT api_keys_mode_standard CHECK (mode = 'live' OR kind = 'standard');
ALTER TABLE lists ADD COLUMN sandbox boolean NOT NULL DEFAULT false;
CREATE UNLOGGED TABLE sandbox_rate_windows (
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    used         integer NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, window_start)
);

-- +goose Down
DROP TABLE sandbox_rate_windows;
ALTER TABLE lists DROP COLUMN sandbox;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_mode_standard;
ALTER TABLE api_keys DROP COLUMN mode;
