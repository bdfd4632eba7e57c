package database

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
)

// QueryTimeout is the deadline of every Postgres call whose context has none of its own: each
// pool acquire, statement, batch, COPY and prepare gets at most this long.
//
// Why: a request must never wait on a Postgres that does not answer. When the network between
// the API and Postgres black-holes packets, sockets stay open and a call without a deadline waits
// for TCP to give up, minutes later; a fault campaign saw requests hang for 150 s. A healthy
// request-path statement takes milliseconds, so one second leaves ample room for a loaded server
// while a partitioned database still yields a 503 (with Retry-After) within two seconds. Work that
// legitimately needs longer (migrations, batch purges, background writers) sets its own deadline,
// which is kept.
const QueryTimeout = 1 * time.Second

// deadlineTracer gives a pgx call a deadline of QueryTimeout when its context has none. pgx uses
// the context a Trace…Start hook returns for the rest of the call and passes it to the matching
// Trace…End hook, which releases the timer; pgxpool does the same for Acquire. When the deadline
// passes mid-query, pgconn's default context watcher sets a deadline on the socket, so the call
// returns even on a black-holed connection; the connection is then closed in the background and
// the pool replaces it.
type deadlineTracer struct {
	timeout time.Duration
}

// cancelKey holds the CancelFunc of the deadline a deadlineTracer added, for the End hook.
type cancelKey struct{}

// start adds the deadline. A context that already has one is kept as it is, but a CancelFunc
// inherited from an enclosing call (a prepare inside a query, say) is hidden, so that the inner
// call's End hook cannot end the outer call's deadline early.
func (t deadlineTracer) start(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok {
		if ctx.Value(cancelKey{}) != nil {
			return context.WithValue(ctx, cancelKey{}, nil)
		}
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	return context.WithValue(ctx, cancelKey{}, cancel)
}

// end releases the deadline start added, if any.
func (deadlineTracer) end(ctx context.Context) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok && cancel != nil {
		cancel()
	}
}

func (t deadlineTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return t.start(ctx)
}

func (deadlineTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t deadlineTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TraceCopyFromEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromEndData) {
	t.end(ctx)
}

func (t deadlineTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareEndData) {
	t.end(ctx)
}

// TraceAcquireStart bounds the wait for a pooled connection: for a free slot when the pool is
// exhausted, for a new connection's handshake, and for pgxpool's liveness ping of an idle one.
// A connection still being built when the deadline passes is finished (or abandoned) in the
// background, bounded by the connect timeout, without holding up the caller.
func (t deadlineTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return t.start(ctx)
}

func (t deadlineTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	t.end(ctx)
}

// AddTracer adds tracer to cfg next to the tracers it already has (the deadline tracer of
// ParseConfig, for one), instead of replacing them. Trace…Start hooks run in the order the
// tracers were added, so a tracer added here sees the deadline the earlier ones set.
func AddTracer(cfg *pgx.ConnConfig, tracer pgx.QueryTracer) {
	if cfg.Tracer == nil {
		cfg.Tracer = tracer
		return
	}
	cfg.Tracer = multitracer.New(cfg.Tracer, tracer)
}
