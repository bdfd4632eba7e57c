-- +goose Up
-- Bulk lists (docs/lists.md). A list's uploaded rows keep their original columns (list_rows);
-- its unique, normalised addresses (list_addresses) are what is verified and billed, in chunks
-- of addresses sorted by domain; list_counts keeps the counts by status and reason up to date as
-- chunks complete, so that progress is one small read however large the list.
--
-- list_rows and list_addresses have no foreign key to lists: a million-row COPY would run a
-- million foreign-key checks, and the list package deletes a list's rows with the list itself.
CREATE TABLE lists (
    id               uuid PRIMARY KEY,
    account_id       uuid NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    key_id           uuid REFERENCES api_keys (id) ON DELETE SET NULL,
    name             text NOT NULL DEFAULT '',
    format           text NOT NULL CHECK (format IN ('csv', 'ndjson', 'text')),
    columns          text[] NOT NULL,
    email_column     integer NOT NULL,
    state            text NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'completed', 'canceled', 'failed')),
    rows             integer NOT NULL DEFAULT 0,
    unique_addresses integer NOT NULL DEFAULT 0,
    verified         integer NOT NULL DEFAULT 0,
    -- Chunks: next_chunk is the first not yet handed to the workers, done_chunks how many have
    -- written their results; at most a window of them is in flight (fair share).
    chunks           integer NOT NULL DEFAULT 0,
    next_chunk       integer NOT NULL DEFAULT 0,
    done_chunks      integer NOT NULL DEFAULT 0,
    -- Free-tier quota units reserved at upload, in quota_month; what is not verified is given
    -- back when the list is canceled, deleted or fails.
    quota_units      integer NOT NULL DEFAULT 0,
    quota_month      date NOT NULL,
    webhook_url      text,
    webhook_secret   text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz
);

CREATE INDEX lists_account_id ON lists (account_id, id DESC);
CREATE INDEX lists_unfinished ON lists (updated_at) WHERE state IN ('queued', 'running');
CREATE INDEX lists_expiry ON lists (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE list_rows (
    list_id uuid NOT NULL,
    row_no  integer NOT NULL,
    email   text NOT NULL, -- normalised: the key into list_addresses
    cols    text[] NOT NULL,
    PRIMARY KEY (list_id, row_no)
);

CREATE TABLE list_addresses (
    list_id uuid NOT NULL,
    email   text NOT NULL,
    idx     integer NOT NULL,
    chunk   integer NOT NULL,
    status  text,
    reason  text,
    result  jsonb,
    PRIMARY KEY (list_id, email)
);

CREATE INDEX list_addresses_chunk ON list_addresses (list_id, chunk);

CREATE TABLE list_counts (
    list_id uuid NOT NULL,
    status  text NOT NULL,
    reason  text NOT NULL,
    n       integer NOT NULL,
    PRIMARY KEY (list_id, status, reason)
);

-- A delivery is a job's callback or a list's completion callback.
ALTER TABLE deliveries ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE deliveries ADD COLUMN list_id uuid REFERENCES lists (id) ON DELETE CASCADE;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_one_subject CHECK ((job_id IS NULL) <> (list_id IS NULL));

-- +goose Down
DELETE FROM deliveries WHERE list_id IS NOT NULL;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_one_subject;
ALTER TABLE deliveries DROP COLUMN list_id;
ALTER TABLE deliveries ALTER COLUMN job_id SET NOT NULL;
DROP TABLE list_counts, list_addresses, list_rows, lists;
