-- +goose Up
-- A refund of a request's quota units (internal/usage, Refund) records its id here in the
-- statement that gives the units back, so that a retry of a refund whose statement committed but
-- whose answer was lost gives nothing back again. Ids are kept a day; each refund clears a few
-- older ones.
CREATE TABLE usage_refunds (
    id         uuid PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE usage_refunds;
