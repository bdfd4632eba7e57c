-- +goose Up
-- sandbox marks a sandbox key's job (docs/sandbox.md), as lists.sandbox marks its lists: a
-- sandbox key sees and changes only sandbox jobs, a live key only live ones ("Live and sandbox
-- data are kept apart"). The jobs that sandbox keys made before the column existed are found by
-- their key's mode.
--
-- Safe for a rolling upgrade: a constant default adds the column without rewriting the table.
-- A sandbox job stored by an API of the previous version while the upgrade runs comes after the
-- UPDATE below and stays marked live: its sandbox key is answered 404 for it, and a live key
-- sees it. Only jobs made during the upgrade's window are concerned; sandbox jobs are completed
-- at once and carry no real verification.
ALTER TABLE jobs ADD COLUMN sandbox boolean NOT NULL DEFAULT false;
UPDATE jobs SET sandbox = true WHERE key_id IN (SELECT id FROM api_keys WHERE mode = 'sandbox');

-- +goose Down
ALTER TABLE jobs DROP COLUMN sandbox;
