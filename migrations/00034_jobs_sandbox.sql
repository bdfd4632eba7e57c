-- +goose Up
-- sandbox marks a sandbox key's job (docs/sandbox.md), as lists.sandbox marks its lists: a
-- sandbox key sees and changes only sandbox jobs, a live key only live ones ("Live and sandbox
-- data are kept apart"). The jobs that sandbox keys made before the column existed are found by
-- their key's mode.
--
-- Safe for a rolling upgrade: a constant default adds the column without rewriting the table;
-- a sandbox job stored by an API of the previous version during the upgrade reads as live until
-- the upgrade's end, as every job did before it.
ALTER TABLE jobs ADD COLUMN sandbox boolean NOT NULL DEFAULT false;
UPDATE jobs SET sandbox = true WHERE key_id IN (SELECT id FROM api_keys WHERE mode = 'sandbox');

-- +goose Down
ALTER TABLE jobs DROP COLUMN sandbox;
