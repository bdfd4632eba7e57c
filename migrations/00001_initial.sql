-- +goose Up
-- The first schema: accounts and their billing state, API keys, plan limits, usage, async jobs,
-- webhook deliveries and their attempts, and the Stripe events already processed.

CREATE TABLE plans (
    tier               text PRIMARY KEY CHECK (tier IN ('free', 'builder', 'scale')),
    monthly_calls      integer NOT NULL CHECK (monthly_calls >= 0),
    rate_limit_per_min integer NOT NULL CHECK (rate_limit_per_min > 0),
    max_keys           integer NOT NULL CHECK (max_keys > 0),
    overage_eur        numeric(12, 6) NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- The published defaults; processes overwrote them from MAILVET_PLAN_* at start-up until 00005.
INSERT INTO plans (tier, monthly_calls, rate_limit_per_min, max_keys, overage_eur) VALUES
    ('free', 500, 10, 2, 0),
    ('builder', 5000, 100, 5, 0.004),
    ('scale', 100000, 1000, 10, 0.002);

CREATE TABLE accounts (
    id                     uuid PRIMARY KEY,
    tier                   text NOT NULL REFERENCES plans (tier),
    email                  text,
    stripe_customer_id     text UNIQUE,
    stripe_subscription_id text,
    subscription_status    text,
    current_period_start   timestamptz,
    current_period_end     timestamptz,
    cancel_at_period_end   boolean NOT NULL DEFAULT false,
    canceled_at            timestamptz,
    cancel_at              timestamptz,
    trial_start            timestamptz,
    trial_end              timestamptz,
    billing_cycle_anchor   timestamptz,
    -- Time of the newest Stripe subscription event applied, so that an older event that arrives
    -- late never overwrites newer state.
    billing_event_at       timestamptz,
    hard_cap_eur           numeric(12, 2) CHECK (hard_cap_eur IS NULL OR hard_cap_eur >= 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- Keys are stored only as SHA-256 hashes; prefix is the masked display form.
CREATE TABLE api_keys (
    id         uuid PRIMARY KEY,
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('standard', 'provisioning')),
    label      text NOT NULL DEFAULT '',
    key_hash   bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    prefix     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE INDEX api_keys_account_active ON api_keys (account_id, kind) WHERE revoked_at IS NULL;
-- Spec §5 rule 5: at most one active provisioning key per account, enforced by the database so
-- that two concurrent bootstraps cannot both win.
CREATE UNIQUE INDEX api_keys_one_provisioning ON api_keys (account_id)
    WHERE kind = 'provisioning' AND revoked_at IS NULL;

-- Usage log: one row per verified email and one per rejected request. item_key makes a
-- redelivered work item idempotent: the same item never writes a second row.
CREATE TABLE usage_log (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key_id       uuid REFERENCES api_keys (id) ON DELETE SET NULL,
    item_key     text NOT NULL UNIQUE,
    occurred_at  timestamptz NOT NULL DEFAULT now(),
    route        text NOT NULL,
    email_domain text,
    status       text,
    failed_check text,
    error_class  text,
    -- billable: the email passed layer 1 (GET /usage, paid summary).
    billable     boolean NOT NULL DEFAULT false,
    -- quota_unit: counts toward the free tier's monthly quota (entered verification).
    quota_unit   boolean NOT NULL DEFAULT false,
    snapshot     jsonb
);

CREATE INDEX usage_log_account_time ON usage_log (account_id, occurred_at);

-- Monthly quota counter: admission increments it atomically, so concurrent requests on any
-- number of API replicas never overshoot the cap.
CREATE TABLE usage_monthly (
    account_id  uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    month       date NOT NULL,
    quota_units integer NOT NULL DEFAULT 0 CHECK (quota_units >= 0),
    billable    integer NOT NULL DEFAULT 0 CHECK (billable >= 0),
    PRIMARY KEY (account_id, month)
);

CREATE TABLE usage_daily (
    account_id uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    day        date NOT NULL,
    billable   integer NOT NULL DEFAULT 0 CHECK (billable >= 0),
    PRIMARY KEY (account_id, day)
);

-- Fixed one-minute rate-limit windows shared by all API replicas.
CREATE TABLE rate_windows (
    account_id   uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    used         integer NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, window_start)
);

CREATE TABLE jobs (
    id             uuid PRIMARY KEY,
    account_id     uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key_id         uuid REFERENCES api_keys (id) ON DELETE SET NULL,
    email          text NOT NULL,
    webhook_url    text NOT NULL,
    -- Needed to sign the callback; never logged and never returned by the API.
    webhook_secret text,
    state          text NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'processing', 'completed', 'failed')),
    result         jsonb,
    error_class    text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    completed_at   timestamptz
);

CREATE INDEX jobs_account_created ON jobs (account_id, created_at);

-- One delivery per job (and per replay); body holds the exact bytes signed and sent.
CREATE TABLE deliveries (
    id              uuid PRIMARY KEY,
    job_id          uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    account_id      uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    url             text NOT NULL,
    body            bytea NOT NULL,
    signature       text,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'retrying', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    replay_of       uuid REFERENCES deliveries (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

CREATE INDEX deliveries_account_created ON deliveries (account_id, created_at);

-- One row per attempt; (delivery_id, attempt) is unique so a crash redelivery cannot record the
-- same attempt twice.
CREATE TABLE delivery_attempts (
    delivery_id   uuid NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt       integer NOT NULL CHECK (attempt >= 1),
    started_at    timestamptz NOT NULL,
    duration_ms   integer NOT NULL,
    http_status   integer,
    error         text,
    response_body text,
    PRIMARY KEY (delivery_id, attempt)
);

-- Stripe events already processed: each event id is applied once.
CREATE TABLE stripe_events (
    id           text PRIMARY KEY,
    type         text NOT NULL,
    created      timestamptz NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE stripe_events, delivery_attempts, deliveries, jobs, rate_windows, usage_daily,
    usage_monthly, usage_log, api_keys, accounts, plans;
