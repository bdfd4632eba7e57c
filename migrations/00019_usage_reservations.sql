-- +goose Up
-- A paid request whose results are recorded after its admission (a batch, a stream, an async
-- job) reserves its emails under the account's hard spend cap at admission, so that requests
-- running at the same time cannot together pass the cap (docs/api.md, "Metering").
--
-- usage_monthly.reserved is the month's sum of the reservations still open. The admission
-- statement reads it on the month row's latest version, under that row's lock, as it reads
-- billable: a reservation committed by a concurrent admission is seen, where a read of
-- usage_reservations (the statement's snapshot) would not see it.
ALTER TABLE usage_monthly ADD COLUMN reserved integer NOT NULL DEFAULT 0;

-- One row per open reservation: the emails of the request not recorded yet. Recording results
-- takes them off; the request's end releases the rest; the sweep releases those of a replica that
-- died (held_by, as usage_log.held_by) and any older than the longest request could run.
CREATE TABLE usage_reservations (
    id         uuid PRIMARY KEY,
    account_id uuid NOT NULL,
    month      date NOT NULL,
    emails     integer NOT NULL CHECK (emails >= 0),
    held_by    uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_reservations_created ON usage_reservations (created_at);
-- A capped account's admission reads the reservations it opened in earlier months.
CREATE INDEX usage_reservations_account ON usage_reservations (account_id, month);

-- +goose Down
DROP TABLE usage_reservations;
ALTER TABLE usage_monthly DROP COLUMN reserved;
