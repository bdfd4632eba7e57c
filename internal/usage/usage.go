// Package usage meters verification traffic as holds on delivery (docs/architecture.md,
// "Metering and admission"; the guarantees: docs/reliability.md, "Metering guarantees").
//
// A contributor needs six ideas, each with one home:
//
//   - Admission (admit.go, sql/admit.sql): one statement takes the request's units from the
//     account's rate window and checks billed + held + units against the free quota or the hard
//     spend cap, under the month row's lock, and inserts a hold. Admitter runs many admissions
//     in one transaction.
//   - Hold (hold.go): the room an admitted request, bulk list or asynchronous job owns until it
//     ends. A request's hold expires when its replica dies; a list's or a job's is released in
//     the transaction that ends the list or the job.
//   - Bill (bill.go, sql/bill.sql): usage rows are written only for results delivered, keyed per
//     item, each moving its unit from held to billed in the same statement. A Ledger bills a
//     request's results in batches behind its response; lists and jobs bill in their own
//     transactions.
//   - Expiry (Expire, sql/expire.sql): the only sweep; it gives back the units of holds whose
//     owner died.
//   - Rejections (rejections.go): the informational rows of refused requests.
//   - Reports (report.go): the counts GET /v1/management/usage, /usage/summary and
//     account.usage_this_month show, and the rate window's state for the RateLimit-* headers.
//
// Nothing is ever withdrawn: a result not delivered was never billed.
package usage

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
)

// DB is the one database interface of Mailvet's stores (database.DB): a pool, a connection or a
// transaction.
type DB = database.DB

// BatchDB is a DB that can also send many statements in one round trip (a pool or a
// transaction), as an Admitter and a Ledger need.
type BatchDB interface {
	DB
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

//go:embed sql/*.sql
var statements embed.FS

// statement is the named SQL statement sql/<name>.sql.
func statement(name string) string {
	b, err := statements.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("usage: no statement %s: %v", name, err))
	}
	return string(b)
}

var (
	admitSQL  = statement("admit")
	billSQL   = statement("bill")
	expireSQL = statement("expire")
	adoptSQL  = statement("adopt")
	rateSQL   = statement("rate_used")
	pruneSQL  = statement("prune_rate_windows")
	monthSQL  = statement("month")
	dailySQL  = statement("daily")
)

// ErrQuotaCheck wraps a datastore failure while checking the free quota (503 quota_check_failed).
var ErrQuotaCheck = errors.New("monthly quota check failed")

// ErrUnavailable wraps a datastore failure elsewhere in admission (503 service_unavailable).
var ErrUnavailable = errors.New("usage datastore unavailable")

// MonthStart is the first instant of t's UTC calendar month.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// WindowEnd is when the one-minute rate window that holds now ends (Decision.Reset).
func WindowEnd(now time.Time) time.Time { return now.UTC().Truncate(time.Minute).Add(time.Minute) }
