-- +goose Up
-- The audit log of security events (docs/security.md, "Audit log"): sign-ins and their failures,
-- the sign-in throttle starting to delay, sign-ups, sign-outs, password changes, API key creation
-- and revocation, spend-cap changes and account deletion. account_id has no foreign key on
-- purpose: an account's events outlive the account (its deletion is itself an event), and a
-- failed sign-in for an email without an account is kept with account_id NULL, seen only by
-- operators. actor says who acted: a dashboard user's email, an API key's display form
-- (sk_mgmt_ab12…yz89, never the key) or "stripe"/"mailvet" for the system; no secret is ever
-- stored. Rows are deleted after MAILVET_AUDIT_RETENTION (audit.Purge).
CREATE TABLE audit_events (
    id          uuid PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    account_id  uuid,
    actor_type  text NOT NULL CHECK (actor_type IN ('dashboard_user', 'api_key', 'system')),
    actor       text NOT NULL CHECK (length(actor) <= 254),
    client_addr inet,
    kind        text NOT NULL CHECK (length(kind) BETWEEN 1 AND 40),
    outcome     text NOT NULL CHECK (outcome IN ('success', 'failure')),
    detail      text NOT NULL DEFAULT '' CHECK (length(detail) <= 200)
);

-- An account's page of events, newest first (audit.List), and the retention purge by age.
CREATE INDEX audit_events_account ON audit_events (account_id, at DESC, id DESC);
CREATE INDEX audit_events_at ON audit_events (at);

-- +goose Down
DROP TABLE audit_events;
