-- +goose Up
-- The dashboard's key forms carry a one-time token, recorded with the key the form created, so
-- that the same form sent again (a reload of the page that showed the new key) creates nothing
-- and says which key it created (docs/dashboard.md, "Keys"). Keys made through the API have none.
ALTER TABLE api_keys ADD COLUMN form_token text CHECK (length(form_token) <= 64);
CREATE UNIQUE INDEX api_keys_form_token ON api_keys (account_id, form_token) WHERE form_token IS NOT NULL;

-- +goose Down
DROP INDEX api_keys_form_token;
ALTER TABLE api_keys DROP COLUMN form_token;
