package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mailvet/mailvet/internal/database"
)

// A kept response of a verify route holds the results it answered, each naming its address in
// its "email" field, sealed under the Idempotency-Key (seal.go), which Mailvet does not keep. So
// that a request to forget an address (DELETE /v1/email/history) reaches those responses too —
// a retry would otherwise replay the result for up to 24 hours — each kept response carries the
// digests of the addresses it names (the column subjects), and DeleteSubject deletes the
// account's responses that name one (docs/personal-data.md, "One address's results").

const subjectLabel = "mailvet idempotency subject v1:"

// ScopeSandbox is the scope of a sandbox key's Idempotency-Keys (Guard.Scope; docs/sandbox.md).
const ScopeSandbox = "sandbox"

// Subject is the digest that names address in account's own kept responses (scope ""):
// ScopedSubject.
func Subject(account, address string) []byte { return ScopedSubject(account, "", address) }

// ScopedSubject is the digest that names address in the kept responses of account's scope (see
// Guard.Scope): SHA-256 of the address trimmed and lower-cased (as list.Normalize compares
// addresses), under the account and the scope, so that the same address has unrelated digests in
// two accounts, and a deletion asked within one scope reaches none of another's.
func ScopedSubject(account, scope, address string) []byte {
	owner := account
	if scope != "" {
		owner += " " + scope
	}
	sum := sha256.Sum256([]byte(subjectLabel + owner + ":" + strings.ToLower(strings.TrimSpace(address))))
	return sum[:]
}

// subjectsOf returns the digests, in scope, of every address that body names in an "email"
// field, at any depth, or nil when it names none or is not JSON.
func subjectsOf(account, scope string, body []byte) [][]byte {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	var out [][]byte
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "email" && !seen[s] {
					seen[s] = true
					out = append(out, ScopedSubject(account, scope, s))
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// DeleteSubject deletes account's kept responses, of the given scopes ("" for the account's own),
// that name any of addresses (each compared as ScopedSubject does), with db (the caller's
// transaction), and returns how many. A retry of one of their requests then runs again instead
// of replaying it.
func DeleteSubject(ctx context.Context, db database.DB, account string, scopes, addresses []string) (int64, error) {
	digests := make([][]byte, 0, len(scopes)*len(addresses))
	for _, scope := range scopes {
		for _, a := range addresses {
			digests = append(digests, ScopedSubject(account, scope, a))
		}
	}
	tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE account_id = $1 AND subjects && $2`, account, digests)
	if err != nil {
		return 0, fmt.Errorf("%w: delete by address: %w", ErrDatastore, err)
	}
	return tag.RowsAffected(), nil
}
