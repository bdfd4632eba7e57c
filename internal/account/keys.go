package account

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/safetext"
)

// MaxLabelLen caps a key label, counted in characters.
const MaxLabelLen = 100

// Key is a key as listed: never the raw key.
type Key struct {
	ID   string
	Kind auth.Kind
	// Mode is live or sandbox (docs/sandbox.md); provisioning keys are live.
	Mode      auth.Mode
	Label     string
	Prefix    string
	CreatedAt time.Time
}

// CreatedKey is a key just created; Raw is returned to the caller once and never stored.
type CreatedKey struct {
	Key
	Raw string
}

// KeyLimitError is ErrKeyLimitReached with the numbers that explain it.
type KeyLimitError struct{ Active, Max int }

func (e *KeyLimitError) Error() string {
	return fmt.Sprintf("%d of %d standard keys are active; revoke one before creating another", e.Active, e.Max)
}

// Unwrap makes errors.Is(err, ErrKeyLimitReached) true.
func (e *KeyLimitError) Unwrap() error { return ErrKeyLimitReached }

// KeyCreatedError is ErrKeyAlreadyCreated with the key the form token created (never its secret).
type KeyCreatedError struct{ Key Key }

func (e *KeyCreatedError) Error() string {
	return fmt.Sprintf("key %s (%s) was already created with this form", e.Key.Label, e.Key.Prefix)
}

// Unwrap makes errors.Is(err, ErrKeyAlreadyCreated) true.
func (e *KeyCreatedError) Unwrap() error { return ErrKeyAlreadyCreated }

// CheckLabel validates a key label: 1 to 100 characters, no control characters. An empty label
// is refused rather than defaulted, because the label is the only thing that tells keys apart
// in listings.
func CheckLabel(label string) error {
	switch {
	case !utf8.ValidString(label):
		return errors.New("label must be valid UTF-8")
	case strings.TrimSpace(label) == "":
		return errors.New("label must not be empty")
	case utf8.RuneCountInString(label) > MaxLabelLen:
		return fmt.Errorf("label must be at most %d characters", MaxLabelLen)
	case strings.IndexFunc(label, unicode.IsControl) >= 0:
		return errors.New("label must not contain control characters")
	case strings.IndexFunc(label, safetext.IsBidiControl) >= 0:
		// A right-to-left override can make a label display as another one in the key list.
		return errors.New("label must not contain bidirectional control characters")
	}
	return nil
}

// ListStandardKeys returns the active standard keys of an account, oldest first.
func (s *Store) ListStandardKeys(ctx context.Context, accountID string) ([]Key, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, kind, mode, label, prefix, created_at FROM api_keys
		WHERE account_id = $1 AND kind = 'standard' AND revoked_at IS NULL
		ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, datastore("list keys", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		err := r.Scan(&k.ID, &k.Kind, &k.Mode, &k.Label, &k.Prefix, &k.CreatedAt)
		return k, err
	})
	if err != nil {
		return nil, datastore("list keys", err)
	}
	return keys, nil
}

// CreateStandardKey creates a standard key unless the account's active standard keys are at its
// plan maximum, maxKeys of its tier (a *KeyLimitError), or its email is not confirmed yet
// (ErrEmailUnconfirmed; so is every key creation, the provisioning key's too). The account row is locked for the check
// and the insert, so two concurrent creates at max−1 cannot both succeed.
func (s *Store) CreateStandardKey(ctx context.Context, accountID, label string, maxKeys func(plan.Tier) int) (CreatedKey, error) {
	return s.CreateStandardKeyOnce(ctx, accountID, label, "", maxKeys)
}

// CreateStandardKeyOnce is CreateStandardKey for a form that may be sent twice (a reload of the
// dashboard's answer page): formToken, unless empty, is recorded with the key, and a second
// create with the same token creates nothing and fails with a *KeyCreatedError naming the key
// the first one created. The account row lock makes the token check and the insert one step.
func (s *Store) CreateStandardKeyOnce(ctx context.Context, accountID, label, formToken string, maxKeys func(plan.Tier) int) (CreatedKey, error) {
	return s.CreateStandardKeyIn(ctx, accountID, label, auth.ModeLive, formToken, maxKeys)
}

// ErrBadMode: a key mode other than live or sandbox.
var ErrBadMode = errors.New(`mode must be "live" or "sandbox"`)

// CreateStandardKeyIn is CreateStandardKeyOnce for a key of mode m: a sandbox key (sk_test_…)
// answers from the sandbox's magic addresses and is never billed (docs/sandbox.md). Live and
// sandbox keys count together toward the plan's maximum of standard keys.
func (s *Store) CreateStandardKeyIn(ctx context.Context, accountID, label string, m auth.Mode, formToken string, maxKeys func(plan.Tier) int) (CreatedKey, error) {
	if m != auth.ModeLive && m != auth.ModeSandbox {
		return CreatedKey{}, ErrBadMode
	}
	if err := CheckLabel(label); err != nil {
		return CreatedKey{}, err
	}
	var out CreatedKey
	err := s.inTx(ctx, "create key", func(tx pgx.Tx) error {
		tier, err := lockForNewKey(ctx, tx, accountID, formToken)
		if err != nil {
			return err
		}
		max, active := maxKeys(tier), 0
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard' AND revoked_at IS NULL`,
			accountID).Scan(&active); err != nil {
			return datastore("count keys", err)
		}
		if active >= max {
			return &KeyLimitError{Active: active, Max: max}
		}
		out, err = insertKey(ctx, tx, accountID, auth.KindStandard, m, label, formToken)
		return err
	})
	return out, err
}

// inTx runs fn in a transaction. fn's own errors pass through as it returned them (domain errors,
// or datastore errors already); a failure to begin, commit or roll back is a datastore error as
// well, so that callers map every datastore failure the same way.
func (s *Store) inTx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	var fnErr error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		fnErr = fn(tx)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return datastore(op, err)
	}
	return nil
}

// lockForNewKey locks the account's row for a key about to be created in tx, and returns its
// tier. A deleted account (docs/personal-data.md) is ErrNotFound: no key may bring it back; one
// whose email is unconfirmed is ErrEmailUnconfirmed; a form token already used is a
// *KeyCreatedError (createdBefore). FOR NO KEY UPDATE, as every locker of accounts: it must not
// wait on a list upload (list.Import).
func lockForNewKey(ctx context.Context, tx pgx.Tx, accountID, formToken string) (plan.Tier, error) {
	var (
		tier        plan.Tier
		unconfirmed bool
	)
	err := tx.QueryRow(ctx, `SELECT tier, email_unconfirmed FROM accounts WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE`,
		accountID).Scan(&tier, &unconfirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", datastore("lock account", err)
	}
	if unconfirmed {
		return "", ErrEmailUnconfirmed
	}
	return tier, createdBefore(ctx, tx, accountID, formToken)
}

// createdBefore fails with a *KeyCreatedError when a key of the account was created with
// formToken; an empty token never matches. The caller holds the account's row lock, so a create
// with the same token that committed meanwhile is seen.
func createdBefore(ctx context.Context, tx pgx.Tx, accountID, formToken string) error {
	if formToken == "" {
		return nil
	}
	var k Key
	err := tx.QueryRow(ctx, `
		SELECT id, kind, mode, label, prefix, created_at FROM api_keys WHERE account_id = $1 AND form_token = $2`,
		accountID, formToken).Scan(&k.ID, &k.Kind, &k.Mode, &k.Label, &k.Prefix, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return datastore("read form token", err)
	}
	return &KeyCreatedError{Key: k}
}

func insertKey(ctx context.Context, tx pgx.Tx, accountID string, kind auth.Kind, mode auth.Mode, label, formToken string) (CreatedKey, error) {
	nk, err := auth.GenerateMode(kind, mode)
	if err != nil {
		return CreatedKey{}, err
	}
	k := CreatedKey{Key: Key{ID: uuid.NewString(), Kind: kind, Mode: mode, Label: label, Prefix: nk.Display}, Raw: nk.Raw}
	err = tx.QueryRow(ctx, `
		INSERT INTO api_keys (id, account_id, kind, mode, label, key_hash, prefix, form_token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		RETURNING created_at`, k.ID, accountID, kind, mode, label, nk.Hash, nk.Display, nullable(formToken)).Scan(&k.CreatedAt)
	if isUnique(err, provisioningUniqueIndex) {
		return CreatedKey{}, ErrProvisioningKeyExists
	}
	if err != nil {
		return CreatedKey{}, datastore("insert key", err)
	}
	return k, nil
}

// RevokeStandardKey revokes an active standard key of the account. Anything else — another
// account's key, a provisioning key, a revoked key, an id that is not a UUID — is ErrKeyNotFound,
// so that the answer reveals nothing about keys the caller does not own.
func (s *Store) RevokeStandardKey(ctx context.Context, accountID, keyID string) error {
	if uuid.Validate(keyID) != nil {
		return ErrKeyNotFound
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE api_keys SET revoked_at = now()
		WHERE id = $1 AND account_id = $2 AND kind = 'standard' AND revoked_at IS NULL`, keyID, accountID)
	if err != nil {
		return datastore("revoke key", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrKeyNotFound
	}
	return nil
}

// CreateProvisioningKey creates the account's provisioning key. A second active one fails with
// ErrProvisioningKeyExists; the partial unique index decides, so concurrent bootstraps are safe.
func (s *Store) CreateProvisioningKey(ctx context.Context, accountID string) (CreatedKey, error) {
	return s.CreateProvisioningKeyOnce(ctx, accountID, "")
}

// CreateProvisioningKeyOnce is CreateProvisioningKey with a form token, as CreateStandardKeyOnce:
// a second create with the same token fails with a *KeyCreatedError, before the one-key rule
// is asked, so that a reload is told its key was created rather than that one exists. With a
// token the account row is locked, so that a concurrent create with it has committed or not.
func (s *Store) CreateProvisioningKeyOnce(ctx context.Context, accountID, formToken string) (CreatedKey, error) {
	if uuid.Validate(accountID) != nil {
		return CreatedKey{}, ErrNotFound
	}
	lock := ""
	if formToken != "" {
		lock = " FOR NO KEY UPDATE" // as every locker of accounts: it must not wait on a list upload (list.Import)
	}
	var out CreatedKey
	err := s.inTx(ctx, "create provisioning key", func(tx pgx.Tx) error {
		var (
			id          string
			unconfirmed bool
		)
		err := tx.QueryRow(ctx, `SELECT id, email_unconfirmed FROM accounts WHERE id = $1 AND deleted_at IS NULL`+lock, accountID).Scan(&id, &unconfirmed)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return datastore("read account", err)
		}
		if unconfirmed {
			return ErrEmailUnconfirmed
		}
		if err := createdBefore(ctx, tx, accountID, formToken); err != nil {
			return err
		}
		out, err = insertKey(ctx, tx, accountID, auth.KindProvisioning, auth.ModeLive, "provisioning", formToken)
		return err
	})
	return out, err
}

// ReplaceProvisioningKeyOnce revokes the account's active provisioning key, if any, and creates
// its successor, in one step: an account has at most one active provisioning key (docs/api.md,
// "Authentication"), so this is how it is rotated without the two-step revoke-then-create, in
// which a create that fails after the revocation leaves the account with none. It returns the
// key revoked (nil when there was none) and the key created. Run it on a transaction (NewStore)
// that also writes both audit events, so that a failure leaves the old key working. formToken
// works as for CreateProvisioningKeyOnce: a form sent twice replaces once and fails with a
// *KeyCreatedError. The account row is locked, so concurrent replacements take turns.
func (s *Store) ReplaceProvisioningKeyOnce(ctx context.Context, accountID, formToken string) (*Key, CreatedKey, error) {
	if uuid.Validate(accountID) != nil {
		return nil, CreatedKey{}, ErrNotFound
	}
	var (
		old *Key
		out CreatedKey
	)
	err := s.inTx(ctx, "replace provisioning key", func(tx pgx.Tx) error {
		if _, err := lockForNewKey(ctx, tx, accountID, formToken); err != nil {
			return err
		}
		var k Key
		err := tx.QueryRow(ctx, `
			UPDATE api_keys SET revoked_at = now()
			WHERE account_id = $1 AND kind = 'provisioning' AND revoked_at IS NULL
			RETURNING id, kind, mode, label, prefix, created_at`, accountID).
			Scan(&k.ID, &k.Kind, &k.Mode, &k.Label, &k.Prefix, &k.CreatedAt)
		switch {
		case err == nil:
			old = &k
		case !errors.Is(err, pgx.ErrNoRows):
			return datastore("revoke provisioning key", err)
		}
		out, err = insertKey(ctx, tx, accountID, auth.KindProvisioning, auth.ModeLive, "provisioning", formToken)
		return err
	})
	if err != nil {
		return nil, CreatedKey{}, err
	}
	return old, out, nil
}

// RevokeProvisioningKey revokes the account's active provisioning key and reports how many keys
// it revoked (0 or 1).
func (s *Store) RevokeProvisioningKey(ctx context.Context, accountID string) (int, error) {
	if _, err := s.Get(ctx, accountID); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE api_keys SET revoked_at = now()
		WHERE account_id = $1 AND kind = 'provisioning' AND revoked_at IS NULL`, accountID)
	if err != nil {
		return 0, datastore("revoke provisioning key", err)
	}
	return int(tag.RowsAffected()), nil
}

// ProvisioningKey returns the account's active provisioning key, or nil when it has none.
func (s *Store) ProvisioningKey(ctx context.Context, accountID string) (*Key, error) {
	if uuid.Validate(accountID) != nil {
		return nil, ErrNotFound
	}
	var k Key
	err := s.pool.QueryRow(ctx, `
		SELECT id, kind, mode, label, prefix, created_at FROM api_keys
		WHERE account_id = $1 AND kind = 'provisioning' AND revoked_at IS NULL`, accountID).
		Scan(&k.ID, &k.Kind, &k.Mode, &k.Label, &k.Prefix, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, datastore("read provisioning key", err)
	}
	return &k, nil
}

// KeyByID returns a key of the account, active or revoked, by its id: what an audit event of
// its revocation names (docs/security.md, "Audit log"). Another account's key is ErrKeyNotFound.
func (s *Store) KeyByID(ctx context.Context, accountID, keyID string) (Key, error) {
	if uuid.Validate(keyID) != nil || uuid.Validate(accountID) != nil {
		return Key{}, ErrKeyNotFound
	}
	var k Key
	err := s.pool.QueryRow(ctx, `
		SELECT id, kind, label, prefix, created_at FROM api_keys WHERE id = $1 AND account_id = $2`,
		keyID, accountID).Scan(&k.ID, &k.Kind, &k.Label, &k.Prefix, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrKeyNotFound
	}
	if err != nil {
		return Key{}, datastore("read key", err)
	}
	return k, nil
}

// InTx runs fn in one transaction, with a Store on it and the transaction itself, for a change
// that writes something of its own in the same transaction: its audit event (docs/security.md,
// "Audit log"). fn's errors pass through; a failure to begin or commit is a datastore error.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx, store *Store) error) error {
	return s.inTx(ctx, "transaction", func(tx pgx.Tx) error { return fn(tx, NewStore(tx)) })
}
