package api

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/account"
)

func accountStore(pool *pgxpool.Pool) *account.Store { return account.NewStore(pool) }

// testWriter sends server logs to the test log, shown only when the test fails.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func mustOK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
