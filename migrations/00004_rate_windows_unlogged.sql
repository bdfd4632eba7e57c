-- +goose Up
-- Rate-limit windows live for a minute and are written on every verify request. Losing them in
-- a crash only forgives the current minute, so they skip the WAL (and its fsync) entirely.
ALTER TABLE rate_windows SET UNLOGGED;

-- +goose Down
ALTER TABLE rate_windows SET LOGGED;
