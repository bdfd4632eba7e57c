-- +goose Up
-- A dashboard user's email is one user in every canonically equivalent Unicode form, as well as
-- in any case (docs/dashboard.md, "Security model"): "é" typed as one code point (NFC) or as
-- "e" and a combining accent (NFD) is one address. Mailvet folds an email by composing it (NFC),
-- lowering it and composing it again (internal/account, FoldEmail); this migration re-folds the
-- users already stored that way and makes the database's fold, which fills email_folded for a
-- writer that leaves it out (a replica of the previous release during a rolling upgrade,
-- docs/deployment.md, "Upgrades and rollback"; TestOldWriterGetsTheNFCFold), do the same. The
-- lowering of migration 29 is kept under the name dashboard_lower_email. Postgres normalises with
-- its own Unicode tables, which may be a version behind Go's: the two differ only on characters
-- assigned in between.
--
-- Postgres's normalize() works only in a UTF8 database. In another (SQL_ASCII), the database's
-- fold stays the lowering alone and the stored folds are left as they are, with a warning, rather
-- than the migration failing (docs/operations.md, "bin/api migrate");
-- TestEmailInAnyUnicodeFormOnASQLASCIIDatabase.
--
-- Two users stored before this migration may have emails that fold alike only once normalised
-- (one signed up with émile@x.test composed, the other decomposed). Accounts are never merged
-- and the migration does not fail: the older user (created first) keeps the address; each later
-- one gets the fold followed by " duplicate " and its own id, which no email typed into a form
-- can fold to, so it signs in by email no more until an operator resolves it (its keys keep
-- working). Each such user is named, by id, in a warning that bin/api migrate logs
-- (docs/operations.md, "bin/api migrate"; TestNFCMigrationKeepsTheOlderOfTwoUsers).
ALTER FUNCTION dashboard_fold_email(text) RENAME TO dashboard_lower_email;

-- +goose StatementBegin
CREATE FUNCTION dashboard_fold_email(email text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fold$ SELECT CASE WHEN current_setting('server_encoding') = 'UTF8'
    THEN normalize(dashboard_lower_email(normalize(email, NFC)), NFC)
    ELSE dashboard_lower_email(email) END $fold$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $refold$
DECLARE
    dup record;
BEGIN
    IF current_setting('server_encoding') <> 'UTF8' THEN
        RAISE WARNING 'the database''s encoding is %, not UTF8: Postgres cannot normalise, and the stored dashboard emails are not folded anew; a user whose email was stored decomposed cannot sign in (docs/operations.md, "bin/api migrate")',
            current_setting('server_encoding');
        RETURN;
    END IF;
    -- The unique index is checked row by row: two users may swap folds on the way.
    DROP INDEX dashboard_users_email;
    CREATE TEMPORARY TABLE dashboard_refold ON COMMIT DROP AS
        SELECT id, dashboard_fold_email(email) AS folded,
               first_value(id) OVER w AS kept,
               row_number() OVER w AS n
        FROM dashboard_users
        WINDOW w AS (PARTITION BY dashboard_fold_email(email) ORDER BY created_at, id);
    UPDATE dashboard_users u
        SET email_folded = CASE WHEN r.n = 1 THEN r.folded ELSE r.folded || ' duplicate ' || r.id END
        FROM dashboard_refold r
        WHERE r.id = u.id
          AND u.email_folded IS DISTINCT FROM CASE WHEN r.n = 1 THEN r.folded ELSE r.folded || ' duplicate ' || r.id END;
    CREATE UNIQUE INDEX dashboard_users_email ON dashboard_users (email_folded);
    FOR dup IN SELECT r.id, r.kept FROM dashboard_refold r WHERE r.n > 1 ORDER BY r.id LOOP
        RAISE WARNING 'dashboard user % has the email of the older dashboard user % in another Unicode form: it keeps its account and keys but cannot sign in by email until an operator deletes one of the two accounts or changes its email (docs/operations.md, "bin/api migrate")',
            dup.id, dup.kept;
    END LOOP;
END
$refold$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION dashboard_fold_email(text);
ALTER FUNCTION dashboard_lower_email(text) RENAME TO dashboard_fold_email;
-- Every user's lowered email is unique: emails that lower alike fold alike too, and a user made
-- a duplicate above had its own lowered email before.
DROP INDEX dashboard_users_email;
UPDATE dashboard_users SET email_folded = dashboard_fold_email(email)
    WHERE email_folded IS DISTINCT FROM dashboard_fold_email(email);
CREATE UNIQUE INDEX dashboard_users_email ON dashboard_users (email_folded);
