-- +goose Up
-- subjects names the addresses a kept response holds (a verify result, a batch's results), as
-- digests (internal/idempotency's Subject), so that DELETE /v1/email/history can delete the
-- responses that would otherwise replay an address's result for up to 24 hours after it was
-- asked to forget it (docs/personal-data.md, "One address's results"). The response itself is
-- sealed under the Idempotency-Key, which Mailvet does not keep, so it cannot be read to find
-- them.
--
-- Safe for a rolling upgrade: the column is nullable, and API replicas of the previous version
-- neither read nor write it. A response they keep, or one kept before this migration, has no
-- subjects and expires within its 24 hours, as before.
ALTER TABLE idempotency_keys ADD COLUMN subjects bytea[];

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN subjects;
