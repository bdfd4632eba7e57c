-- +goose Up
-- Idempotency keys keep neither the key nor the response in the clear (docs/api.md,
-- "Idempotency"): key becomes the hex SHA-256 of a label and the Idempotency-Key
-- (internal/idempotency's lookupOf), and a response completed from now on is sealed with a key
-- derived from the Idempotency-Key (sealed = true). Responses kept before this migration stay
-- readable as they are (sealed = false) until their 24 hours end and the sweep deletes them.
ALTER TABLE idempotency_keys ADD COLUMN sealed boolean NOT NULL DEFAULT false;
UPDATE idempotency_keys SET key = encode(sha256(convert_to('mailvet idempotency lookup v1:' || key, 'UTF8')), 'hex');

-- +goose Down
-- The keys' hashes cannot be turned back into keys: the kept responses are dropped.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys DROP COLUMN sealed;
