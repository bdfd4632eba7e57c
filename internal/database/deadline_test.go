package database_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// margin is what a call may take beyond its deadline: the socket deadline firing, the error
// travelling back, a loaded test machine under -race.
const margin = 600 * time.Millisecond

// within fails t unless took is in [min, max].
func within(t *testing.T, what string, took, min, max time.Duration) {
	t.Helper()
	if took < min || took > max {
		t.Errorf("%s took %v, want %v to %v", what, took, min, max)
	}
	t.Logf("%s took %v", what, took)
}

// A statement whose caller set no deadline gets QueryTimeout; one with a deadline keeps it.
func TestQueryTimeoutAppliesOnlyWithoutADeadline(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.URL(t))

	start := time.Now()
	_, err := pool.Exec(context.Background(), `SELECT pg_sleep(5)`)
	within(t, "pg_sleep(5) without a deadline", time.Since(start), database.QueryTimeout-100*time.Millisecond, database.QueryTimeout+margin)
	if !database.Unreachable(err) {
		t.Errorf("a statement that overran QueryTimeout: err %v, want one Unreachable reports", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start = time.Now()
	if _, err := pool.Exec(ctx, `SELECT pg_sleep(1.5)`); err != nil {
		t.Fatalf("pg_sleep(1.5) with the caller's 10 s deadline: %v", err)
	}
	within(t, "pg_sleep(1.5) with a 10 s deadline", time.Since(start), 1500*time.Millisecond, 10*time.Second)

	// The pool is still usable after the timed-out statement.
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT $1::int`, 7).Scan(&n); err != nil || n != 7 {
		t.Fatalf("after a timeout: %d, %v", n, err)
	}
}

// Every kind of call works under the deadline tracer: a prepared statement inside a query (its
// End hook must not end the query's deadline), a transaction, a batch, a COPY.
func TestEveryKindOfCallWorksWithTheTracer(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.URL(t))
	ctx := context.Background()
	pgtest.Exec(t, pool, `CREATE TABLE t (n int)`)

	for i := range 3 { // the second run finds the statement cached, the first prepares it
		var n int
		if err := pool.QueryRow(ctx, `SELECT $1::int + 1`, i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("query with an argument: %d, %v", n, err)
		}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, 1)
		return err
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO t VALUES ($1)`, 2)
	b.Queue(`INSERT INTO t VALUES ($1)`, 3)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"n"}, pgx.CopyFromRows([][]any{{4}, {5}})); err != nil {
		t.Fatalf("copy: %v", err)
	}
	rows, _ := pool.Query(ctx, `SELECT n FROM t ORDER BY n`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(got) != 5 {
		t.Fatalf("rows %v, %v", got, err)
	}
}

// Waiting for a pooled connection is bounded too: the pool's only connection is busy.
func TestAcquireTimesOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.URL(t)+"&pool_max_conns=1")
	ctx := context.Background()
	busy, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Release()
	start := time.Now()
	_, err = pool.Exec(ctx, `SELECT 1`)
	within(t, "acquire from an exhausted pool", time.Since(start), database.QueryTimeout-100*time.Millisecond, database.QueryTimeout+margin)
	if !errors.Is(err, context.DeadlineExceeded) || !database.Unreachable(err) {
		t.Errorf("err %v, want a deadline Unreachable reports", err)
	}
}

// On a black-holed connection (a partition: sockets open, nothing forwarded) a call returns by
// its deadline: QueryTimeout without one of the caller's, the caller's own when set, even a
// longer one. After the partition the pool replaces its dead connections by itself.
func TestBlackHoledPoolAnswersByTheDeadline(t *testing.T) {
	t.Parallel()
	url, proxy := pgtest.Proxied(t, pgtest.URL(t))
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	pgtest.Exec(t, pool, `SELECT 1`)

	proxy.Hold()
	defer proxy.Restore() // before the pool closes: it would wait for its held connections

	start := time.Now()
	var n int
	err := pool.QueryRow(ctx, `SELECT $1::int`, 1).Scan(&n)
	within(t, "query on a black-holed pool", time.Since(start), database.QueryTimeout-100*time.Millisecond, database.QueryTimeout+margin)
	if !database.Unreachable(err) {
		t.Errorf("err %v, want one Unreachable reports", err)
	}

	// A pool with no idle connection left must open one: the handshake is black-holed too.
	start = time.Now()
	_, err = pool.Exec(ctx, `SELECT 1`)
	within(t, "exec needing a new connection", time.Since(start), 0, database.QueryTimeout+margin)
	if !database.Unreachable(err) {
		t.Errorf("err %v, want one Unreachable reports", err)
	}

	longer, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = pool.Exec(longer, `SELECT 1`)
	within(t, "exec with the caller's 2.5 s deadline", time.Since(start), 2400*time.Millisecond, 2500*time.Millisecond+margin)
	if err == nil {
		t.Error("a black-holed exec succeeded")
	}

	proxy.Restore()
	start = time.Now()
	for {
		err := pool.QueryRow(ctx, `SELECT $1::int`, 2).Scan(&n)
		if err == nil && n == 2 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the pool did not recover after the partition: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("pool answered again %v after the partition ended", time.Since(start))
}

// countingTracer counts the statements it sees.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A tracer added for measurement does not replace the deadline.
func TestAddTracerComposes(t *testing.T) {
	t.Parallel()
	cfg, err := database.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &countingTracer{}
	database.AddTracer(cfg.ConnConfig, counter)
	pool, err := database.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	start := time.Now()
	_, err = pool.Exec(context.Background(), `SELECT pg_sleep(5)`)
	within(t, "pg_sleep(5) with an added tracer", time.Since(start), database.QueryTimeout-100*time.Millisecond, database.QueryTimeout+margin)
	if err == nil {
		t.Error("the deadline is gone with the added tracer")
	}
	if counter.n.Load() != 1 {
		t.Errorf("the added tracer saw %d statements, want 1", counter.n.Load())
	}
	var _ pgxpool.AcquireTracer = cfg.ConnConfig.Tracer.(pgxpool.AcquireTracer) // still bounds Acquire
}
