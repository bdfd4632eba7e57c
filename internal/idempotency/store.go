package idempotency

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
)

// Store keeps the idempotency keys in Postgres (table idempotency_keys), so every replica of the
// API sees the same keys.
type Store struct {
	db database.DB
	// lease is how long a key stays claimed by a request that neither completed nor released it
	// (its replica died): after it, the next request with the key takes it over.
	lease time.Duration
}

// ErrDatastore marks a failed statement on the keys; the API answers it as it answers the other
// stores' (docs/errors.md, "datastore_error").
var ErrDatastore = errors.New("idempotency keys: datastore")

// NewStore returns a store on db.
func NewStore(db database.DB) *Store { return &Store{db: db, lease: DefaultLease} }

// DefaultLease outlasts the longest request that takes a key: an upload may take 10 minutes to
// arrive and 10 more to import (docs/lists.md, "Limits").
const DefaultLease = 30 * time.Minute

// claim is one attempt at a key. Exactly one of its outcomes holds: owner is set (the caller runs
// the request and then completes or releases the key), done is set (a completed response to
// replay or refuse), or neither (another request holds the key: wait and try again).
type claim struct {
	owner uuid.UUID
	done  *record
}

// record is a completed request: the hash of the request and the response to replay.
type record struct {
	// hash is keyedHash of the request's SHA-256 (a sealed row), or the plain SHA-256 (a row kept
	// before sealing); matches compares a retry's SHA-256 with either.
	hash   []byte
	keyed  bool
	status int
	header http.Header
	body   []byte
}

// tryClaim inserts the key for account, or takes over a row that expired or whose request's
// lease ran out; otherwise it reads the row that holds the key.
func (s *Store) tryClaim(ctx context.Context, account, key string, now time.Time) (claim, error) {
	owner := uuid.New()
	lookup := lookupOf(key)
	var got bool
	err := s.db.QueryRow(ctx, `INSERT INTO idempotency_keys AS k (account_id, key, owner, claimed_at, expires_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (account_id, key) DO UPDATE
		   SET owner = EXCLUDED.owner, claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at,
		       request_hash = NULL, status = NULL, header = NULL, body = NULL, sealed = false, subjects = NULL
		 WHERE k.expires_at <= $4 OR (k.status IS NULL AND k.claimed_at <= $6)
		RETURNING true`, account, lookup, owner, now, now.Add(Lifetime), now.Add(-s.lease)).Scan(&got)
	switch {
	case err == nil:
		return claim{owner: owner}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return claim{}, fmt.Errorf("%w: claim: %w", ErrDatastore, err)
	}
	var (
		r      record
		status *int
		header []byte
		sealed bool
	)
	err = s.db.QueryRow(ctx, `SELECT request_hash, status, header, body, sealed FROM idempotency_keys
		WHERE account_id = $1 AND key = $2`, account, lookup).Scan(&r.hash, &status, &header, &r.body, &sealed)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && status == nil {
		return claim{}, nil // released since, or still running
	}
	if err != nil {
		return claim{}, fmt.Errorf("%w: read: %w", ErrDatastore, err)
	}
	r.status = *status
	if sealed {
		if r.body, err = open(account, key, r.body); err != nil {
			return claim{}, err
		}
		r.keyed = true
	}
	if err := json.Unmarshal(header, &r.header); err != nil {
		return claim{}, fmt.Errorf("read idempotency key: header: %w", err)
	}
	return claim{done: &r}, nil
}

// complete stores the response of the request that owns the key.
func (s *Store) complete(ctx context.Context, account, key string, owner uuid.UUID, r record) error {
	return completeIn(ctx, s.db, account, key, owner, r)
}

// completeIn stores the response of the request that owns the key with db: the store's pool, or
// the transaction of the request's effect (Keep).
func completeIn(ctx context.Context, db database.DB, account, key string, owner uuid.UUID, r record) error {
	header, err := json.Marshal(r.header)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `UPDATE idempotency_keys SET request_hash = $4, status = $5, header = $6, body = $7, sealed = true,
		subjects = $8 WHERE account_id = $1 AND key = $2 AND owner = $3`,
		account, lookupOf(key), owner, keyedHash(account, key, r.hash), r.status, header, seal(account, key, r.body),
		subjectsOf(account, scopeOf(key), r.body))
	if err != nil {
		return fmt.Errorf("%w: complete: %w", ErrDatastore, err)
	}
	return nil
}

// release gives the key up, so that the next request with it runs. With ifUnstored, a key whose
// response is stored is kept: the response of an effect that committed (Keep) although the
// handler saw its commit fail. The delete then waits for that transaction's lock on the row, so it
// decides right also while the commit's outcome is still open.
func (s *Store) release(ctx context.Context, account, key string, owner uuid.UUID, ifUnstored bool) error {
	_, err := s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE account_id = $1 AND key = $2 AND owner = $3
		AND (NOT $4 OR status IS NULL)`, account, lookupOf(key), owner, ifUnstored)
	if err != nil {
		return fmt.Errorf("%w: release: %w", ErrDatastore, err)
	}
	return nil
}

// sweepBatch bounds one statement of Sweep, so that it holds few row locks at a time.
const sweepBatch = 1000

// Sweep deletes the keys whose 24 hours have passed at now, in batches, and returns how many.
// Several replicas may run it at once: each batch skips the rows another one has locked.
func Sweep(ctx context.Context, db database.DB, now time.Time) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE (account_id, key) IN (
			SELECT account_id, key FROM idempotency_keys WHERE expires_at <= $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, now, sweepBatch)
		if err != nil {
			return total, fmt.Errorf("%w: sweep: %w", ErrDatastore, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			return total, nil
		}
	}
}

// matches says whether sum, the SHA-256 of a retry with the key of account, is the request r
// completed.
func (r *record) matches(account, key string, sum []byte) bool {
	if r.keyed {
		return hmac.Equal(keyedHash(account, key, sum), r.hash)
	}
	return bytes.Equal(sum, r.hash)
}
