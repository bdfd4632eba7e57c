-- +goose Up
-- The customer dashboard (docs/dashboard.md): its users, their server-side sessions and the
-- counters that throttle sign-in. 00008 is the bulk lists' migration; goose applies whatever
-- versions exist in order, and the numbering already has a gap (00002).

-- One dashboard user per account. The email is unique regardless of case (the index on lower()),
-- and the password is stored only as an argon2id hash in PHC string form.
CREATE TABLE dashboard_users (
    id            uuid PRIMARY KEY,
    account_id    uuid NOT NULL UNIQUE REFERENCES accounts (id) ON DELETE CASCADE,
    email         text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX dashboard_users_email ON dashboard_users (lower(email));

-- Sessions: the cookie carries a random token, the table only its SHA-256, so a copy of the
-- database cannot be replayed as a session. csrf_secret is the session's CSRF token.
CREATE TABLE dashboard_sessions (
    token_hash  bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id     uuid NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    csrf_secret bytea NOT NULL CHECK (length(csrf_secret) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX dashboard_sessions_user ON dashboard_sessions (user_id);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

-- Failed sign-ins per subject in fixed windows: the subject is 'account:' and the SHA-256 of
-- the lower-cased email, or 'ip:' and the client address (an IPv6 client's /64). Unknown emails
-- are counted too, so the throttle behaves the same whether an account exists or not.
CREATE TABLE dashboard_signin_failures (
    subject      text PRIMARY KEY CHECK (length(subject) <= 100),
    window_start timestamptz NOT NULL,
    failures     integer NOT NULL CHECK (failures >= 0)
);

-- +goose Down
DROP TABLE dashboard_signin_failures, dashboard_sessions, dashboard_users;
