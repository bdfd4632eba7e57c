package privacy

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// A user whose email is stored decomposed (e and a combining accent, from a sign-up before emails
// were composed) is throttled under the email's fold, composed (account.FoldEmail): deleting the
// account removes that counter too (docs/personal-data.md, dashboard_signin_failures).
func TestDeleteAccountRemovesTheFoldedEmailsCounter(t *testing.T) {
	pool := pgtest.New(t)
	id, email := uuid.NewString(), "E\u0301mile@owner.example"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, id, email)
	pgtest.Exec(t, pool, `INSERT INTO dashboard_users (id, account_id, email, email_folded, password_hash) VALUES ($1, $2, $3, $4, 'h')`,
		uuid.NewString(), id, email, account.FoldEmail(email))
	s := sha256.Sum256([]byte(account.FoldEmail(email)))
	subject := "account:" + hex.EncodeToString(s[:])
	pgtest.Exec(t, pool, `INSERT INTO dashboard_signin_failures (subject, window_start, failures) VALUES ($1, now(), 2)`, subject)
	pgtest.Must(t, DeleteAccount(ctx, pool, id, byTest), "delete")
	var left int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM dashboard_signin_failures WHERE subject = $1`, subject).Scan(&left), "count")
	if left != 0 {
		t.Errorf("the sign-in counter of %+q outlived the account's deletion", email)
	}
}
