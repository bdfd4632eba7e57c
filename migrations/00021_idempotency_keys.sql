-- +goose Up
-- Idempotency keys (docs/api.md, "Idempotency"): one row per account and Idempotency-Key of a
-- POST that creates something. The row is inserted before the request runs (owner names that
-- run; status is NULL while it runs), so a concurrent duplicate finds it and waits; it is
-- completed with the request's hash and the response to replay, or deleted when the request
-- failed so that a retry can run. expires_at is 24 hours after the first request: the sweep
-- (idempotency.Sweep) deletes rows past it, and a claim takes such a row over.
CREATE TABLE idempotency_keys (
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key          text NOT NULL,
    owner        uuid NOT NULL,
    claimed_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    request_hash bytea,
    status       integer,
    header       jsonb,
    body         bytea,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
