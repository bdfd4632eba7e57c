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
// its "email" field. The response is sealed under the Idempotency-Key (seal.go), which Mailvet
// does not keep, so a data subject's request to forget an address (DELETE /v1/email/history)
// could not find the responses that hold it, and a retry would replay the result for up to 24
// hours. Each kept response therefore carries the digests of the addresses it names (the column
// subjects), and DeleteSubject deletes the account's responses that name one
// (docs/personal-data.md, "One address's results").

const subjectLabel = "mailvet idempotency subject v1:"

// Subject is the digest that names address in account's kept responses: SHA-256 of the address
// trimmed and lower-cased (as list.Normalize compares addresses), under the account, so that the
// same address has unrelated digests in two accounts.
func Subject(account, address string) []byte {
	sum := sha256.Sum256([]byte(subjectLabel + account + ":" + strings.ToLower(strings.TrimSpace(address))))
	return sum[:]
}

// subjectsOf returns the digests of every address that body names in an "email" field, at any
// depth, or nil when it names none or is not JSON.
func subjectsOf(account string, body []byte) [][]byte {
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
					out = append(out, Subject(account, s))
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

// DeleteSubject deletes account's kept responses that name any of addresses (each compared as
// Subject does), with db (the caller's transaction), and returns how many. A retry of one of
// their requests then runs again instead of replaying it.
func DeleteSubject(ctx context.Context, db database.DB, account string, addresses []string) (int64, error) {
	digests := make([][]byte, len(addresses))
	for i, a := range addresses {
		digests[i] = Subject(account, a)
	}
	tag, err := db.Exec(ctx, `DELETE FROM idempotency_keys WHERE account_id = $1 AND subjects && $2`, account, digests)
	if err != nil {
		return 0, fmt.Errorf("%w: delete by address: %w", ErrDatastore, err)
	}
	return tag.RowsAffected(), nil
}
