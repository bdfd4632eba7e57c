-- +goose Up
-- One row per list upload sent from a rendered dashboard form (docs/dashboard.md, "Lists"): the
-- form carries a one-time token, which the upload claims here before it streams the file to the
-- API. A second POST of the same form (a double click, a resent request) finds the claim and goes
-- to the list the first one created instead of uploading, and billing, the file again. The claim
-- is made before the list exists, because the list is created by the API the dashboard calls,
-- so it lives in its own table rather than on lists. Rows older than a day are cleared in small
-- batches on each upload.
CREATE TABLE dashboard_upload_tokens (
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    token_hash bytea NOT NULL CHECK (length(token_hash) = 32),
    list_id    uuid, -- NULL while the first upload is on its way
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, token_hash)
);

CREATE INDEX dashboard_upload_tokens_created ON dashboard_upload_tokens (created_at);

-- +goose Down
DROP TABLE dashboard_upload_tokens;
