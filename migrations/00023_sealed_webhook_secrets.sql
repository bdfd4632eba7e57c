-- +goose Up
-- Webhook secrets at rest (docs/operations.md, "Secrets at rest"; docs/reliability.md, "Webhook
-- secrets at rest"). jobs.webhook_secret and lists.webhook_secret now hold sealed values
-- ("mvs1:<key id>:<base64>", package internal/sealed) written by the API, and are erased once the
-- job's or list's delivery exists. The delivery carries the sealed secret in its own column while
-- it may still be attempted or replayed: the Standard Webhooks signature covers each attempt's
-- timestamp, so it cannot be computed once at enqueue like X-Service-Signature.
--
-- Values stored before this migration are plain text; SQL cannot seal them (it has no key), so
-- the webhook workers' re-seal loop seals them, like values under a retired key.
ALTER TABLE deliveries ADD COLUMN webhook_secret text;

-- Finished jobs, and lists whose callback exists, need their secret no more: the deliveries made
-- before this migration carry their signature. Erased now rather than sealed later. (Not undone
-- by Down: an erased secret is gone.)
UPDATE jobs SET webhook_secret = NULL WHERE webhook_secret IS NOT NULL AND state IN ('completed', 'failed');
UPDATE lists SET webhook_secret = NULL
WHERE webhook_secret IS NOT NULL AND EXISTS (SELECT 1 FROM deliveries d WHERE d.list_id = lists.id);

COMMENT ON COLUMN jobs.webhook_secret IS 'sealed (internal/sealed); NULL once the job is finished';
COMMENT ON COLUMN lists.webhook_secret IS 'sealed (internal/sealed); NULL once the list''s callback exists';
COMMENT ON COLUMN deliveries.webhook_secret IS 'sealed (internal/sealed); NULL once the delivery or a replay of it is delivered';

-- +goose Down
COMMENT ON COLUMN lists.webhook_secret IS NULL;
COMMENT ON COLUMN jobs.webhook_secret IS NULL;
ALTER TABLE deliveries DROP COLUMN webhook_secret;
