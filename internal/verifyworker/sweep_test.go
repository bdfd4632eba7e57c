package verifyworker

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// TestSweepRequeuesLostMessages: a retrying job whose re-probe message was lost, and a processing
// job whose runner died and whose message was lost, are queued again by the sweep, although the
// stream still remembers their first message's id within its duplicate window (which swallows a
// plain PublishJob); a pending job whose message is still queued is not queued twice, and a
// second sweep adds nothing.
func TestSweepRequeuesLostMessages(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := streamMsgs(t, ctx, js, queue.StreamJobs)

	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")
	jobs := job.NewStore(pool)
	create := func() uuid.UUID {
		id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x"})
		pgtest.Must(t, err, "create job")
		return id
	}
	// lose publishes the job's message as the API does, then deletes it: the message is gone,
	// its id stays in the duplicate window.
	lose := func(id uuid.UUID) {
		body := []byte(`{"job_id":"` + id.String() + `"}`)
		ack, err := js.Publish(ctx, queue.SubjectJob, body, jetstream.WithMsgID("job."+id.String()))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := js.Stream(ctx, queue.StreamJobs)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.DeleteMsg(ctx, ack.Sequence); err != nil {
			t.Fatal(err)
		}
	}

	retrying, processing, pending := create(), create(), create()
	for _, id := range []uuid.UUID{retrying, processing} {
		_, err := jobs.Start(ctx, id)
		pgtest.Must(t, err, "start job")
		lose(id)
	}
	if done, err := job.Retry(ctx, pool, retrying, time.Now()); err != nil || !done {
		t.Fatalf("retry: %v %v", done, err)
	}
	pgtest.Exec(t, pool, `UPDATE jobs SET next_attempt_at = now() - interval '10 minutes' WHERE id = $1`, retrying)
	pgtest.Exec(t, pool, `UPDATE jobs SET updated_at = now() - interval '10 minutes' WHERE id = $1`, processing)
	pgtest.Exec(t, pool, `UPDATE jobs SET created_at = now() - interval '10 minutes' WHERE id = $1`, pending)
	if err := queue.PublishJob(ctx, js, queue.Layout{}, pending); err != nil { // its message is still queued
		t.Fatal(err)
	}
	// The window swallows a plain re-publish of a lost message: the reason for the sweep's own ids.
	if err := queue.PublishJob(ctx, js, queue.Layout{}, retrying); err != nil {
		t.Fatal(err)
	}
	if n := msgs(); n != 1 {
		t.Fatalf("%d messages before the sweep, want 1 (the pending job's)", n)
	}

	r := NewJobRunner(pool, js, nil, app.NewLogger(io.Discard, "test"))
	r.SweepAge, r.AckWait = time.Minute, time.Minute // processing jobs are stuck after 5 min
	r.sweep(ctx)
	if n := msgs(); n != 3 {
		t.Fatalf("%d messages after the sweep, want 3 (pending, and the two re-queued)", n)
	}
	r.sweep(ctx)
	if n := msgs(); n != 3 {
		t.Fatalf("%d messages after a second sweep, want still 3", n)
	}

	// A processing job updated within the bound is left alone.
	busy := create()
	_, err = jobs.Start(ctx, busy)
	pgtest.Must(t, err, "start job")
	pgtest.Exec(t, pool, `UPDATE jobs SET updated_at = now() - interval '4 minutes' WHERE id = $1`, busy)
	r.sweep(ctx)
	if n := msgs(); n != 3 {
		t.Fatalf("%d messages after a sweep with a busy job, want still 3", n)
	}
}

// The sweep leaves alone a running list whose chunks may still be with a worker — one that went
// without progress for longer than the old 2 minutes but less than a chunk's budget, its write's
// and AckWait together — even when StallAfter is set below that; publishing its chunks again would
// have two workers probe the same addresses. A list quiet for longer has its chunks published.
func TestListSweepWaitsOutAChunkBeingVerified(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := streamMsgs(t, ctx, js, queue.StreamLists)

	store, l := runningList(t, ctx, pool)
	// Its chunk is with a worker (no message in the stream), and nothing was written for a while.

	r := NewListRunner(store, js, nil, app.NewLogger(io.Discard, "test"))
	r.streamCreated = streamOfOld // the list's quiet minutes below are older than the test's stream
	if r.stallAge() <= r.AckWait+r.ChunkBudget+r.WriteBudget {
		t.Fatalf("stall age %v is not above AckWait + ChunkBudget + WriteBudget", r.stallAge())
	}
	for _, stallAfter := range []time.Duration{r.StallAfter, time.Minute} {
		r.StallAfter = stallAfter
		pgtest.Exec(t, pool, `UPDATE lists SET updated_at = now() - interval '3 minutes' WHERE id = $1`, l.ID)
		r.sweep(ctx)
		if n := msgs(); n != 0 {
			t.Fatalf("StallAfter %v: the sweep published %d chunks of a list quiet for 3 minutes", stallAfter, n)
		}
	}
	pgtest.Exec(t, pool, `UPDATE lists SET updated_at = now() - $2 * interval '1 second' WHERE id = $1`,
		l.ID, (r.stallAge() + time.Minute).Seconds())
	r.sweep(ctx)
	if n := msgs(); n != 1 {
		t.Fatalf("%d messages after the sweep of a stalled list, want its 1 chunk", n)
	}
}

// A NATS server that restarted without its store re-creates the LISTS stream empty: a running
// list whose last progress came before that has lost its handed-out chunks, and the next sweep
// publishes them at once rather than after stallAge (5 minutes by default), once.
func TestListSweepRepublishesChunksOfALostStream(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := streamMsgs(t, ctx, js, queue.StreamLists)

	store, l := runningList(t, ctx, pool)
	r := NewListRunner(store, js, nil, app.NewLogger(io.Discard, "test"))

	// Its chunk went out a minute ago (well within stallAge), and the stream has been there for
	// longer.
	pgtest.Exec(t, pool, `UPDATE lists SET updated_at = now() - interval '1 minute' WHERE id = $1`, l.ID)
	r.streamCreated = streamOfOld
	r.sweep(ctx)
	if n := msgs(); n != 0 {
		t.Fatalf("the sweep published %d chunks of a list that went quiet a minute ago", n)
	}
	// The stream is lost and re-created, as by a server that restarted without its store; the
	// runner reads the new stream's creation time from NATS.
	pgtest.Must(t, js.DeleteStream(ctx, queue.StreamLists), "delete stream")
	msgs = streamMsgs(t, ctx, js, queue.StreamLists)
	r.streamCreated = nil
	r.sweep(ctx)
	if n := msgs(); n != 1 {
		t.Fatalf("%d messages after the sweep that followed the stream's loss, want the list's 1 chunk", n)
	}
	r.sweep(ctx) // touched: not again
	if n := msgs(); n != 1 {
		t.Fatalf("%d messages after a second sweep, want still 1", n)
	}
}

// A chunk lost with the old stream is published again even when its list has made progress since
// the new stream was created (its other chunks being written), which no stall rule sees; a chunk
// already published into the new stream is not queued twice. Once the stream is older than the
// duplicate window allows, the sweep does not do it again.
func TestListSweepRepublishesLostChunksOfAListStillMoving(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	streamMsgs(t, ctx, js, queue.StreamLists) // the stream the lists' chunks were handed out to
	lost, lostList := runningList(t, ctx, pool)
	_, kept := runningList(t, ctx, pool)
	r := NewListRunner(lost, js, nil, app.NewLogger(io.Discard, "test"))

	// The stream is lost and re-created; both lists make progress after that, and the chunk of
	// one of them is published into the new stream (a worker's retry), the other's is not.
	pgtest.Must(t, js.DeleteStream(ctx, queue.StreamLists), "delete stream")
	msgs := streamMsgs(t, ctx, js, queue.StreamLists)
	pgtest.Exec(t, pool, `UPDATE lists SET updated_at = now() + interval '1 minute' WHERE id = ANY($1)`,
		[]uuid.UUID{lostList.ID, kept.ID})
	pgtest.Must(t, queue.PublishChunks(ctx, js, queue.Layout{}, 2*time.Second,
		[]queue.ChunkMessage{{ListID: kept.ID, Chunk: 0}}, nil), "publish")
	if n := msgs(); n != 1 {
		t.Fatalf("%d messages before the sweep, want 1", n)
	}
	r.sweep(ctx)
	if n := msgs(); n != 2 {
		t.Fatalf("%d messages after the sweep, want 2: the lost chunk added, the other not twice", n)
	}
	stream, err := js.Stream(ctx, queue.StreamLists)
	pgtest.Must(t, err, "stream")
	last, err := stream.GetLastMsgForSubject(ctx, queue.SubjectListChunk)
	pgtest.Must(t, err, "last message")
	if !strings.Contains(string(last.Data), lostList.ID.String()) {
		t.Fatalf("the sweep published %s, want the chunk of list %s", last.Data, lostList.ID)
	}
	r.sweep(ctx)
	if n := msgs(); n != 2 {
		t.Fatalf("%d messages after a second sweep, want still 2", n)
	}

	// A runner that first sees the stream when it is no longer fresh leaves it alone.
	late := NewListRunner(lost, js, nil, app.NewLogger(io.Discard, "test"))
	created := time.Now().Add(-freshStream - time.Second)
	late.streamCreated = func(context.Context) time.Time { return created }
	pgtest.Must(t, stream.Purge(ctx), "purge")
	late.sweep(ctx)
	if n := msgs(); n != 0 {
		t.Fatalf("%d messages after the sweep of a runner that came late, want 0", n)
	}
}

// runningList imports a list of two addresses and starts it: its one chunk is handed out, and no
// message for it is published.
func runningList(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (*list.Store, list.List) {
	t.Helper()
	acct, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "create account")
	store := list.NewStore(pool, list.Defaults())
	rd, err := list.NewReader(strings.NewReader("a@x.test\nb@y.test\n"), list.Text, "", list.Limits{MaxRows: 10, MaxLineBytes: 100})
	pgtest.Must(t, err, "reader")
	l, err := store.Import(ctx, list.Upload{AccountID: acct.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder], Now: time.Now()}, rd)
	pgtest.Must(t, err, "import")
	chunks, err := store.Start(ctx, l.AccountID)
	pgtest.Must(t, err, "start")
	if len(chunks) != 1 {
		t.Fatalf("started %d chunks, want 1", len(chunks))
	}
	return store, l
}

// streamOfOld stands for a LISTS stream created an hour ago.
func streamOfOld(context.Context) time.Time { return time.Now().Add(-time.Hour) }

// streamMsgs creates the streams and returns a function that reads how many messages the stream
// name holds.
func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) func() uint64 {
	t.Helper()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
}
