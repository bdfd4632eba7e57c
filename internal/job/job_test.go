package job_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// A job goes pending → processing → completed once; a second finish, a redelivered start after
// it, another account's read and a discard of a started job all do nothing.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	pool, acct, jobs := setup(t)
	ctx := context.Background()
	other, err := account.NewStore(pool).Create(ctx, account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")

	id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x", WebhookSecret: "s3cret-s3cret"})
	pgtest.Must(t, err, "create job")
	j, err := jobs.Get(ctx, id, acct.ID)
	pgtest.Must(t, err, "get job")
	if j.State != job.Pending || j.Result != nil || j.CompletedAt != nil || j.WebhookSecret != "s3cret-s3cret" {
		t.Fatalf("new job: %+v", j)
	}
	if _, err := jobs.Get(ctx, id, other.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("another account read the job: %v", err)
	}
	if stale, err := jobs.Stale(ctx, -time.Minute, time.Hour, 10); err != nil || len(stale) != 1 || stale[0].ID != id || stale[0].State != job.Pending {
		t.Errorf("stale pending jobs: %v %v, want [%s]", stale, err, id)
	}

	started, err := jobs.Start(ctx, id)
	pgtest.Must(t, err, "start job")
	if started.State != job.Processing || started.Email != "ann@example.com" {
		t.Fatalf("started job: %+v", started)
	}
	if gone, err := jobs.Discard(ctx, id); err != nil || gone {
		t.Fatalf("discard of a started job: removed %v, err %v; want false, nil", gone, err)
	}
	if _, err := jobs.Get(ctx, id, acct.ID); err != nil {
		t.Fatalf("a started job was discarded: %v", err)
	}
	// A runner that died mid-job: the redelivered message starts it again.
	if _, err := jobs.Start(ctx, id); err != nil {
		t.Fatalf("restart of a processing job: %v", err)
	}
	if _, err := job.Finish(ctx, pool, id, job.Pending, nil, ""); err == nil {
		t.Error("finished into a non-final state")
	}
	done, err := job.Finish(ctx, pool, id, job.Completed, []byte(`{"status":"deliverable"}`), "")
	if err != nil || !done {
		t.Fatalf("finish: %v %v", done, err)
	}
	if done, err := job.Finish(ctx, pool, id, job.Failed, []byte(`{}`), "X"); err != nil || done {
		t.Errorf("second finish: done %v, err %v; want false, nil", done, err)
	}
	if _, err := jobs.Start(ctx, id); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("start of a completed job: %v, want ErrNotFound", err)
	}
	j, err = jobs.Get(ctx, id, acct.ID)
	pgtest.Must(t, err, "get job")
	if j.State != job.Completed || string(j.Result) != `{"status": "deliverable"}` || j.CompletedAt == nil {
		t.Errorf("completed job: state %s result %s completed %v", j.State, j.Result, j.CompletedAt)
	}

	// A job that could not be queued is discarded while still pending.
	gone, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "bob@example.com", WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	if removed, err := jobs.Discard(ctx, gone); err != nil || !removed {
		t.Fatalf("discard of a pending job: removed %v, err %v; want true, nil", removed, err)
	}
	if _, err := jobs.Get(ctx, gone, acct.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("discarded job still there: %v", err)
	}
	if _, err := jobs.Start(ctx, uuid.New()); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("start of an unknown job: %v", err)
	}
}

// A greylisted job goes processing → retrying → processing: a redelivery before its re-probe is
// due is told when to come back, one after it takes the job; retries and the window's start are
// kept across re-probes, and only a processing job can be finished.
func TestJobRetrying(t *testing.T) {
	t.Parallel()
	pool, acct, jobs := setup(t)
	ctx := context.Background()
	id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	_, err = jobs.Start(ctx, id)
	pgtest.Must(t, err, "start job")

	at := time.Now().Add(time.Hour)
	if done, err := job.Retry(ctx, pool, id, at); err != nil || !done {
		t.Fatalf("retry: %v %v", done, err)
	}
	if done, err := job.Retry(ctx, pool, id, at); err != nil || done {
		t.Errorf("retry of a retrying job: %v %v", done, err)
	}
	j, err := jobs.Get(ctx, id, acct.ID)
	pgtest.Must(t, err, "get job")
	if j.State != job.Retrying || j.Retries != 1 || j.NextAttemptAt == nil || j.RetryingSince == nil {
		t.Fatalf("retrying job: %+v", j)
	}
	since := *j.RetryingSince
	if done, _ := job.Finish(ctx, pool, id, job.Completed, []byte(`{}`), ""); done {
		t.Error("finished a retrying job")
	}
	var notDue *job.NotDueError
	if _, err := jobs.Start(ctx, id); !errors.As(err, &notDue) || notDue.At.Sub(at).Abs() > time.Millisecond {
		t.Fatalf("early start: %v, want NotDueError at %v", err, at)
	}

	pgtest.Exec(t, pool, `UPDATE jobs SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, id)
	j, err = jobs.Start(ctx, id)
	if err != nil || j.State != job.Processing || j.NextAttemptAt != nil || j.Retries != 1 {
		t.Fatalf("due start: %+v %v", j, err)
	}
	if done, err := job.Retry(ctx, pool, id, time.Now()); err != nil || !done {
		t.Fatalf("second retry: %v %v", done, err)
	}
	j, _ = jobs.Get(ctx, id, acct.ID)
	if j.Retries != 2 || !j.RetryingSince.Equal(since) {
		t.Errorf("second retry: retries %d since %v, want 2 %v", j.Retries, j.RetryingSince, since)
	}
	if _, err := jobs.Start(ctx, id); err != nil {
		t.Fatalf("start of a due job: %v", err)
	}
	if done, err := job.Finish(ctx, pool, id, job.Completed, []byte(`{}`), ""); err != nil || !done {
		t.Errorf("finish after retries: %v %v", done, err)
	}
}

// The sweep's list: pending jobs older than the age, retrying jobs whose re-probe is overdue by
// more than the age, and processing jobs not updated for longer than the processing bound — and
// no other job.
func TestStaleJobs(t *testing.T) {
	t.Parallel()
	pool, acct, jobs := setup(t)
	ctx := context.Background()
	create := func(state job.State, created, updated, next string) uuid.UUID {
		t.Helper()
		id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x"})
		pgtest.Must(t, err, "create job")
		pgtest.Exec(t, pool, `UPDATE jobs SET state = $2, created_at = now() - $3::interval, updated_at = now() - $4::interval,
			next_attempt_at = CASE WHEN $5 = '' THEN NULL ELSE now() - $5::interval END WHERE id = $1`,
			id, state, created, updated, next)
		return id
	}
	const age, processingAge = time.Minute, 10 * time.Minute
	want := map[uuid.UUID]job.State{
		create(job.Pending, "2 minutes", "2 minutes", ""):         job.Pending,
		create(job.Retrying, "1 hour", "30 minutes", "2 minutes"): job.Retrying, // re-probe overdue by 2 min
		create(job.Retrying, "1 hour", "30 minutes", ""):          job.Retrying, // no attempt time: by its update
		create(job.Processing, "1 hour", "11 minutes", ""):        job.Processing,
	}
	create(job.Pending, "10 seconds", "10 seconds", "")        // queued just now
	create(job.Retrying, "1 hour", "30 minutes", "30 seconds") // re-probe just due: its message is coming
	create(job.Retrying, "1 hour", "1 minute", "-10 minutes")  // re-probe in the future
	create(job.Processing, "1 hour", "2 minutes", "")          // a runner is on it, or its redelivery is coming
	create(job.Completed, "1 hour", "1 hour", "")
	create(job.Failed, "1 hour", "1 hour", "")

	stale, err := jobs.Stale(ctx, age, processingAge, 100)
	pgtest.Must(t, err, "stale")
	got := map[uuid.UUID]job.State{}
	for _, s := range stale {
		got[s.ID] = s.State
		if s.UpdatedAt.IsZero() {
			t.Errorf("%s: no updated_at", s.ID)
		}
	}
	if len(got) != len(want) {
		t.Errorf("stale = %v, want %v", got, want)
	}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("job %s: stale as %q, want %q", id, got[id], st)
		}
	}
	if stale, err := jobs.Stale(ctx, age, processingAge, 2); err != nil || len(stale) != 2 {
		t.Errorf("limit 2: %d jobs, %v", len(stale), err)
	}
}

// setup is a fresh database with one free account and a job store on it.
func setup(t *testing.T) (*pgxpool.Pool, account.Account, *job.Store) {
	t.Helper()
	pool := pgtest.New(t)
	acct, err := account.NewStore(pool).Create(context.Background(), account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")
	return pool, acct, job.NewStore(pool)
}

// A job's failed attempts are counted while it is unfinished, whatever state it is in, and Fail
// ends it from any of them, once, erasing its secret; a finished job counts nothing and is not
// failed again.
func TestJobFailuresAndFail(t *testing.T) {
	t.Parallel()
	pool, acct, jobs := setup(t)
	ctx := context.Background()
	id, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "ann@example.com", WebhookURL: "https://hooks.example.com/x", WebhookSecret: "sealed"})
	pgtest.Must(t, err, "create job")
	if n, err := job.CountFailure(ctx, pool, id); err != nil || n != 1 {
		t.Fatalf("first failure of a pending job: %d, %v; want 1", n, err)
	}
	_, err = jobs.Start(ctx, id)
	pgtest.Must(t, err, "start job")
	if n, err := job.CountFailure(ctx, pool, id); err != nil || n != 2 {
		t.Fatalf("second failure, processing: %d, %v; want 2", n, err)
	}
	u, err := job.Unfinished(ctx, pool, id)
	if err != nil || u.Email != "ann@example.com" || u.WebhookURL != "https://hooks.example.com/x" || u.WebhookSecret != "sealed" || u.AccountID.String() != acct.ID {
		t.Fatalf("unfinished job: %+v, %v", u, err)
	}

	if done, err := job.Fail(ctx, pool, id, []byte(`{"error":"internal"}`), job.ErrorRepeatedFailure); err != nil || !done {
		t.Fatalf("fail: %v, %v; want done", done, err)
	}
	j, err := jobs.Get(ctx, id, acct.ID)
	pgtest.Must(t, err, "get job")
	if j.State != job.Failed || j.CompletedAt == nil || j.WebhookSecret != "" || string(j.Result) != `{"error": "internal"}` {
		t.Errorf("failed job: state %s, completed %v, secret kept %v, result %s", j.State, j.CompletedAt, j.WebhookSecret != "", j.Result)
	}
	if done, err := job.Fail(ctx, pool, id, []byte(`{}`), job.ErrorRepeatedFailure); err != nil || done {
		t.Errorf("second fail: %v, %v; want not done", done, err)
	}
	if _, err := job.CountFailure(ctx, pool, id); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("failure of a finished job: %v, want ErrNotFound", err)
	}
	if _, err := job.Unfinished(ctx, pool, id); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("unfinished read of a finished job: %v, want ErrNotFound", err)
	}

	// A retrying job (waiting for a greylisting re-probe) is failed too.
	id2, err := jobs.Create(ctx, job.New{AccountID: acct.ID, Email: "bob@example.com", WebhookURL: "https://hooks.example.com/x"})
	pgtest.Must(t, err, "create job")
	_, err = jobs.Start(ctx, id2)
	pgtest.Must(t, err, "start job")
	_, err = job.Retry(ctx, pool, id2, time.Now().Add(time.Hour))
	pgtest.Must(t, err, "retry job")
	if done, err := job.Fail(ctx, pool, id2, []byte(`{}`), job.ErrorRepeatedFailure); err != nil || !done {
		t.Fatalf("fail of a retrying job: %v, %v; want done", done, err)
	}
	j, err = jobs.Get(ctx, id2, acct.ID)
	pgtest.Must(t, err, "get job")
	if j.State != job.Failed || j.NextAttemptAt != nil {
		t.Errorf("failed retrying job: state %s, next attempt %v", j.State, j.NextAttemptAt)
	}
}
