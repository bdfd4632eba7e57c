package usage_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// lateCommit is a database whose statements that write usage rows commit and then report that
// their deadline expired: what the caller sees when pgx's cancel arrives after the commit.
type lateCommit struct{ database.DB }

func writesRows(sql string) bool { return strings.Contains(sql, "INSERT INTO usage_log") }

func (l lateCommit) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := l.DB.Exec(ctx, sql, args...)
	if err == nil && writesRows(sql) {
		return tag, context.DeadlineExceeded
	}
	return tag, err
}

func (l lateCommit) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row := l.DB.QueryRow(ctx, sql, args...)
	if writesRows(sql) {
		return lateRow{row}
	}
	return row
}

type lateRow struct{ pgx.Row }

func (r lateRow) Scan(dest ...any) error {
	if err := r.Row.Scan(dest...); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// A write that committed although the caller saw its deadline expire is not billed: the rows a
// failed Record wrote are withdrawn when the charge closes, and the row an admission wrote is
// withdrawn, behind the error, when the admission reports a datastore error (docs/reliability.md, "Cluster fault
// test").
func TestRowsOfATimedOutWriteThatCommittedAreWithdrawn(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ledger := usage.NewLedger(lateCommit{pool}, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")

	// A batch of 2: admitted, its rows recorded, but Record reports a timeout; the batch answers
	// 503 and closes its charge.
	charge, _, err := ledger.Admit(ctx, freeReq(acct, 2))
	pgtest.Must(t, err, "admit")
	rows := make([]usage.Row, 2)
	for i := range rows {
		rows[i] = usage.ResultRow(usage.Item{Key: fmt.Sprintf("batch:%d", i), AccountID: acct, Route: "verify_batch"},
			verdict.Result{Email: fmt.Sprintf("u%d@example.com", i), Status: verdict.StatusDeliverable}, nil)
		rows[i].OccurredAt = now
	}
	if err := charge.Record(ctx, rows); err == nil {
		t.Fatal("Record reported no error")
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 2 {
		t.Fatalf("%d rows before Close, want the 2 that committed", n)
	}
	charge.Close()
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d rows after Close, want none: the batch was not answered", n)
	}
	if q, b, d := monthly(t, pool, acct); q != 0 || b != 0 || d != 0 {
		t.Errorf("after the failed batch: quota %d, billable %d, daily %d; want 0 of each", q, b, d)
	}

	// A single verification whose admission wrote its row and then reported a timeout.
	req := freeReq(acct, 1)
	req.Rows = []usage.Row{pendingRow(acct, "single:late")}
	if _, _, err := ledger.Admit(ctx, req); err == nil {
		t.Fatal("Admit reported no error")
	}
	// Taken back behind the error, not before it (the 503 does not wait for Postgres).
	waitFor(t, "the row of the admission that reported a timeout to be withdrawn", func() bool {
		return count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key = 'single:late'`) == 0
	})
	if _, b, d := monthly(t, pool, acct); b != 0 || d != 0 {
		t.Errorf("after the failed admission: billable %d, daily %d; want 0 and 0", b, d)
	}
}

// slowCommit is a database whose admission statement that writes a row reports its deadline at
// once and commits 300 ms later, as a statement held up by a lock or a stalled disk does after
// its caller gave up.
type slowCommit struct{ database.DB }

func (s slowCommit) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !writesRows(sql) {
		return s.DB.QueryRow(ctx, sql, args...)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		var a, b *int
		_ = s.DB.QueryRow(context.Background(), sql, args...).Scan(&a, &b)
	}()
	return deadlineRow{}
}

type deadlineRow struct{}

func (deadlineRow) Scan(...any) error { return context.DeadlineExceeded }

// The row of a single verification whose admission reported a timeout and committed after the
// first withdrawal found nothing is withdrawn by a later one, with its quota unit (found in
// review: a single withdrawal left it billed until the replica retired).
func TestAdmissionRowThatCommitsLateIsWithdrawn(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ledger := usage.NewLedger(slowCommit{pool}, slog.New(slog.NewTextHandler(&logtest.Buffer{}, nil)))
	defer ledger.Close()
	acct := newAccount(t, pool, "free")
	req := freeReq(acct, 1)
	req.Rows = []usage.Row{pendingRow(acct, "single:slow")}
	if _, _, err := ledger.Admit(ctx, req); err == nil {
		t.Fatal("Admit reported no error")
	}
	time.Sleep(2500 * time.Millisecond) // past the commit (0.3 s) and the withdrawal after 1 s
	if n := count(t, pool, `SELECT count(*) FROM usage_log WHERE item_key = 'single:slow'`); n != 0 {
		q, b, d := monthly(t, pool, acct)
		t.Errorf("the row that committed after the first withdrawal is still there: quota %d, billable %d, daily %d", q, b, d)
	}
	if q, b, d := monthly(t, pool, acct); q != 0 || b != 0 || d != 0 {
		t.Errorf("after the late withdrawal: quota %d, billable %d, daily %d; want 0 of each", q, b, d)
	}
}
