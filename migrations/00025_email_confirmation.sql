-- +goose Up
-- Email confirmation and password reset by email (docs/dashboard.md, "Email confirmation" and
-- "Password reset").
--
-- An account made by a dashboard sign-up starts unconfirmed: it can sign in, but it gets no API
-- keys and no verifications until the link mailed to its email is opened. Every other account
-- (made by an operator with `bin/api admin create-account`, or before this migration) is trusted
-- and stays confirmed, so the column defaults to false.
ALTER TABLE accounts ADD COLUMN email_unconfirmed boolean NOT NULL DEFAULT false;

-- The one-time links mailed to dashboard users: the mail carries a random 32-byte token, the
-- table only its SHA-256, so a copy of the database opens no link. A token is deleted when it is
-- used (single use), and every token of a user and purpose when one of them is.
CREATE TABLE dashboard_email_tokens (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id    uuid NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    purpose    text NOT NULL CHECK (purpose IN ('confirm', 'reset')),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX dashboard_email_tokens_user ON dashboard_email_tokens (user_id, purpose);
CREATE INDEX dashboard_email_tokens_expires ON dashboard_email_tokens (expires_at);

-- +goose Down
DROP TABLE dashboard_email_tokens;
ALTER TABLE accounts DROP COLUMN email_unconfirmed;
