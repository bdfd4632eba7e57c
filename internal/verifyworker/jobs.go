package verifyworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/webhook"
)

// JobRunner completes asynchronous verification jobs: it verifies the address, then in one
// transaction stores the result, logs usage and creates the webhook delivery, and finally
// queues the delivery. Every step is idempotent, so a redelivered job message is harmless.
type JobRunner struct {
	pool *pgxpool.Pool
	jobs *job.Store
	js   jetstream.JetStream
	pipe Pipeline
	log  *slog.Logger
	// Lag, when set, records how long each job waited in its stream (docs/operations.md).
	Lag *queuelag.Recorder
	// failures, when set, counts the attempts that failed, by what followed (JobRunner.failed).
	failures *attempts

	Concurrency int
	// AckWait bounds one job's verification; a runner that dies mid-job has its job redelivered
	// after it (a live runner keeps the job it holds alive: consumeConcurrently).
	AckWait time.Duration
	// WriteBudget bounds the job's database work before and after its verification — starting
	// it, then storing its outcome, usage row and delivery and publishing the delivery — each on
	// its own clock, apart from AckWait: a job whose verification used its whole budget still
	// gets its result written, instead of failing its write and coming back to fail the same way.
	WriteBudget time.Duration
	// SweepEvery and SweepAge: jobs whose message seems lost are queued again (sweep) — pending
	// jobs older than SweepAge (an API that died between storing a job and publishing it),
	// retrying jobs whose re-probe is overdue by more than SweepAge, and processing jobs not
	// updated for StuckAckWaits × AckWait (their message lost with a NATS store).
	SweepEvery, SweepAge time.Duration
	// Layout is the deployment's NATS layout (names, and the replication of a stream the runner
	// has to re-create); the zero Layout is unprefixed, one replica.
	Layout queue.Layout
	// GreylistWindow bounds the re-probes of a job whose probe was greylisted, from the first
	// greylisting reply (MAILVET_GREYLIST_WINDOW); once it is over, the job completes with the
	// greylisted (unknown) result. 0 never re-probes. GreylistDelay is the wait before the first
	// re-probe when the reply suggests none; it doubles with each further one.
	GreylistWindow, GreylistDelay time.Duration
	// GreylistRetries caps the re-probes of one job.
	GreylistRetries int
	// MaxFailures is how many attempts of one job may fail, for a reason that is not an outage,
	// before the job is failed (docs/reliability.md, "Asynchronous jobs that keep failing").
	// FailureRetry is the wait before the attempt after the first failure; it doubles with each
	// further one.
	MaxFailures  int
	FailureRetry time.Duration
	// OutageRetry is how long a job that met an outage (Postgres unreachable, NATS unavailable)
	// waits before it is tried again. Such a try does not count toward MaxFailures.
	OutageRetry time.Duration

	once sync.Once
	cons *queue.Consumer
}

// NewJobRunner returns a runner with production defaults.
func NewJobRunner(pool *pgxpool.Pool, js jetstream.JetStream, pipe Pipeline, log *slog.Logger) *JobRunner {
	return &JobRunner{pool: pool, jobs: job.NewStore(pool), js: js, pipe: pipe, log: log,
		Concurrency: 64, AckWait: 30 * time.Second, WriteBudget: 10 * time.Second, SweepEvery: 15 * time.Second, SweepAge: 30 * time.Second,
		GreylistWindow: 15 * time.Minute, GreylistDelay: time.Minute, GreylistRetries: 5,
		MaxFailures: 5, FailureRetry: 2 * time.Second, OutageRetry: time.Second}
}

// Run consumes jobs until ctx ends, then waits for the jobs in flight. The consumer heals by
// itself after NATS restarts or loses its store (queue.Consumer).
func (j *JobRunner) Run(ctx context.Context) error {
	return consumeConcurrently(ctx, j.consumer(), j.Concurrency, j.AckWait, j.SweepEvery, j.sweep, func(msg jetstream.Msg) {
		j.Lag.Took(queuelag.ConsumerJobs, msg)
		var m queue.JobMessage
		if err := json.Unmarshal(msg.Data(), &m); err != nil {
			j.log.Warn("bad job message", "err", err)
			_ = msg.Ack() // poison: acking drops it; nothing can ever parse it
			return
		}
		later, err := j.handle(m.JobID)
		switch {
		case err != nil:
			j.failed(msg, m.JobID, err)
		case later > 0:
			// A re-probe: the message comes back after the delay. Until then it counts
			// against the consumer's MaxAckPending, which leaves room for such waits
			// (queue.JobsConsumer), and the NAK resets its AckWait.
			if err := msg.NakWithDelay(later); err != nil {
				j.log.Warn("schedule job re-probe", "err", err) // redelivered after AckWait
			}
		default:
			_ = msg.Ack()
		}
	})
}

// consumeConcurrently runs handle on the messages of cons, at most n at once, and sweep every
// sweepEvery, until ctx ends; then it waits for the handlers in flight. A message that arrives
// while the runner is stopping is handed back (Nak) for another runner to take at once.
//
// A message is this runner's from the moment cons hands it over: it may wait for a slot behind
// n messages that each take up to their whole budget, then be worked on for its own, which
// together is longer than AckWait. So it is kept alive (held) from then until handle has
// acknowledged it or handed it back, and JetStream never gives it to another runner meanwhile:
// only a runner that died (or lost its connection) lets its messages go after AckWait
// (docs/architecture.md, "Consumers"). cons pulls one message at a time (pullOne), so none waits
// unattended in its buffer.
func consumeConcurrently(ctx context.Context, cons *queue.Consumer, n int, ackWait, sweepEvery time.Duration,
	sweep func(context.Context), handle func(jetstream.Msg)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = loop.Every(ctx, sweepEvery, sweep)
	}()
	slots := make(chan struct{}, n)
	return cons.Run(ctx, func(m jetstream.Msg) {
		msg := hold(m, ackWait)
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			_ = msg.Nak() // stopping: another runner takes it now
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer msg.release() // a handler that neither acked nor handed it back: AckWait runs
			handle(msg)
		}()
	})
}

// pullOne is the pull buffer of the job and list consumers. nats.go's iterator asks for more only
// when fewer than half of its buffer's messages are left, and the reader takes the next one only
// once the last has a slot: with a buffer of 1 it asks for a message exactly when a slot is free,
// so no message sits delivered and unattended (its AckWait running) in the client's buffer.
const pullOne = 1

// held is a message kept alive with InProgress every ackWait/3 until it is acknowledged, handed
// back or terminated; the heartbeats stop before that answer is sent, so that none can follow a
// NakWithDelay and cut its delay short to AckWait.
type held struct {
	jetstream.Msg
	stop func()
}

func hold(m jetstream.Msg, ackWait time.Duration) *held {
	_ = m.InProgress() // AckWait started when the server delivered it; restart it now
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(max(ackWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	var once sync.Once
	return &held{Msg: m, stop: func() {
		once.Do(func() { close(done) })
		<-exited
	}}
}

func (h *held) release() { h.stop() }

func (h *held) Ack() error                          { h.stop(); return h.Msg.Ack() }
func (h *held) DoubleAck(ctx context.Context) error { h.stop(); return h.Msg.DoubleAck(ctx) }
func (h *held) Nak() error                          { h.stop(); return h.Msg.Nak() }
func (h *held) NakWithDelay(d time.Duration) error  { h.stop(); return h.Msg.NakWithDelay(d) }
func (h *held) Term() error                         { h.stop(); return h.Msg.Term() }
func (h *held) TermWithReason(r string) error       { h.stop(); return h.Msg.TermWithReason(r) }

// consumer is the runner's JOBS consumer, made once so that Ready and Run share it.
func (j *JobRunner) consumer() *queue.Consumer {
	j.once.Do(func() {
		j.cons = queue.NewConsumer(j.js, queue.JobsConsumer(j.Concurrency, j.AckWait), j.Layout, pullOne, j.log)
	})
	return j.cons
}

// Ready reports, for /readyz, whether the jobs consumer is running.
func (j *JobRunner) Ready(ctx context.Context) error { return j.consumer().Check(ctx) }

// callback is the body POSTed to the caller: the verify result plus job_id, and error
// "internal" when verification itself failed (docs/api.md, "The callback request").
type callback struct {
	verdict.Result
	JobID string `json:"job_id"`
	Error string `json:"error,omitempty"`
}

// handle runs one attempt of job id. later > 0 asks for the message again after that long: the
// job waits for a re-probe (Retrying), or was redelivered before its re-probe was due.
func (j *JobRunner) handle(id uuid.UUID) (later time.Duration, err error) {
	sctx, cancel := context.WithTimeout(context.Background(), j.WriteBudget)
	jb, err := j.jobs.Start(sctx, id)
	cancel()
	var notDue *job.NotDueError
	switch {
	case errors.Is(err, job.ErrNotFound):
		return 0, nil // finished already, or discarded: a redelivery with nothing left to do
	case errors.As(err, &notDue):
		return max(time.Until(notDue.At), 10*time.Millisecond), nil
	case err != nil:
		return 0, err
	}

	start := time.Now()
	vctx, cancel := context.WithTimeout(context.Background(), j.AckWait)
	res, verr := j.verify(vctx, jb.Email)
	cancel()
	ctx, cancel := context.WithTimeout(context.Background(), j.WriteBudget)
	defer cancel()
	// latency_ms counts from the start of the request (docs/api.md), which for a job is its
	// creation: queueing and greylisting re-probes included. created_at is Postgres's clock, so
	// a worker's clock running behind it can never make the answer shorter than the probe.
	res.LatencyMS = verify.MS(max(time.Since(start), time.Since(jb.CreatedAt)))
	if verr == nil && res.Reason == verdict.ReasonGreylisted {
		if wait, ok := j.reprobe(jb, res.RetryAfter, time.Now()); ok {
			// Greylisted: the real answer comes on a retry. Nothing is recorded or delivered
			// until the job finishes, so the job is billed and called back once.
			done, err := job.Retry(ctx, j.pool, jb.ID, time.Now().Add(wait))
			if err != nil || !done {
				return 0, err // !done: another runner has it
			}
			return wait, nil
		}
	}
	cb := callback{Result: res, JobID: jb.ID.String()}
	state, errClass := job.Completed, ""
	if verr != nil {
		j.log.Error("job verification failed", "job_id", jb.ID, "err", verr)
		cb = failedCallback(jb)
		state, errClass = job.Failed, errorType(verr)
	}
	body, err := json.Marshal(cb)
	if err != nil {
		return 0, err
	}

	// The job's outcome, its usage row and its delivery are stored together, or not at all.
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if done, err := job.Finish(ctx, tx, jb.ID, state, body, errClass); err != nil || !done {
		return 0, err // !done: another runner finished it first
	}
	it := usage.Item{Key: "job:" + jb.ID.String(), AccountID: jb.AccountID.String(), Route: "verify_async"}
	if jb.KeyID != nil {
		it.KeyID = jb.KeyID.String()
	}
	row := usage.ResultRow(it, cb.Result, body)
	if verr != nil {
		row = usage.FailedRow(it, cb.Result, body, errClass)
	}
	// The job owns the hold its request made (its id is the job's): the row is billed against it
	// and the hold ends with the job, in this transaction.
	if err := usage.Bill(ctx, tx, jb.ID, []usage.Row{row}, true); err != nil {
		return 0, err
	}
	deliveryID, err := webhook.CreateDelivery(ctx, tx, jb.ID, jb.AccountID, jb.WebhookURL, jb.WebhookSecret, body)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	// Published after commit; if this fails the delivery stays pending and the webhook
	// worker's outbox sweep publishes it.
	if err := webhook.Publish(ctx, j.js, j.Layout, deliveryID); err != nil {
		j.log.Warn("publish delivery", "delivery_id", deliveryID, "err", err)
	}
	return 0, nil
}

// failedCallback is the callback body of a job whose verification itself failed: the address as
// sent and an unknown result with error "internal", nothing of the cause (docs/api.md, "The
// callback request").
func failedCallback(jb job.Job) callback {
	cb := callback{Result: verdict.Result{Email: jb.Email}, JobID: jb.ID.String(), Error: "internal"}
	cb.Result.Apply(verdict.OutcomeUnknown)
	cb.Confidence = 0
	return cb
}

// failed answers an attempt of job id that ended in err. An outage (Postgres unreachable, NATS
// unavailable) is tried again after OutageRetry for as long as it lasts, uncounted. Any other
// failure is counted on the job, in Postgres, so that the count holds across redeliveries,
// runners and restarts, and the job is tried again after FailureRetry, doubled per failure;
// the MaxFailures-th fails the job (giveUp). JetStream's delivery count cannot be the limit: it
// also counts the deliveries of outages and of greylisting re-probes. The message is dropped only
// once the job is recorded as failed; until then it keeps coming back.
func (j *JobRunner) failed(msg jetstream.Msg, id uuid.UUID, err error) {
	if outage(err) {
		j.log.Warn("job: dependency unavailable; trying again", "job_id", id, "err", err)
		j.failures.add(attemptOutage)
		_ = msg.NakWithDelay(j.OutageRetry)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.WriteBudget)
	defer cancel()
	n, cerr := job.CountFailure(ctx, j.pool, id)
	switch {
	case errors.Is(cerr, job.ErrNotFound):
		_ = msg.Ack() // finished meanwhile, or deleted: nothing left to try
	case cerr != nil:
		j.log.Error("job attempt failed, and so did counting it", "job_id", id, "err", err, "count_err", cerr)
		j.failures.add(attemptOutage)
		_ = msg.NakWithDelay(j.OutageRetry)
	case n >= j.MaxFailures:
		// The operators' log keeps the cause (a database error, an encoding error); the
		// customer's job says only that verification failed (giveUp).
		j.log.Error("job failed too often; failing it", "job_id", id, "failures", n, "err", err)
		if gerr := j.giveUp(id); gerr != nil {
			j.log.Error("fail job", "job_id", id, "err", gerr)
			j.failures.add(attemptOutage)
			_ = msg.NakWithDelay(j.OutageRetry) // comes back, and fails the job then
			return
		}
		j.failures.add(attemptFailed)
		_ = msg.Term()
	default:
		j.log.Warn("job attempt failed; trying again", "job_id", id, "failures", n, "err", err)
		j.failures.add(attemptRetry)
		_ = msg.NakWithDelay(j.failureDelay(n))
	}
}

// failureDelay is the wait after a job's n-th failure: FailureRetry doubled for each failure
// before it, but at most AckWait. The count updates the job, so a wait below AckWait keeps it
// far from the sweep's age for processing jobs (StuckAckWaits × AckWait).
func (j *JobRunner) failureDelay(n int) time.Duration {
	return min(max(j.FailureRetry, time.Millisecond)<<min(max(n-1, 0), 16), j.AckWait)
}

// giveUp fails job id after its attempts kept failing, as a job whose verification failed ends:
// its callback body says error "internal", its delivery is created and published, and its hold is
// released with nothing billed and no quota unit counted — the customer got no result (docs/api.md,
// "Metering"). It writes as little as it can, so that the write that kept failing is not among
// its own: no result of the engine, and no usage row. The job's error class is
// job.ErrorRepeatedFailure.
func (j *JobRunner) giveUp(id uuid.UUID) error {
	ctx, cancel := context.WithTimeout(context.Background(), j.WriteBudget)
	defer cancel()
	tx, err := j.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	jb, err := job.Unfinished(ctx, tx, id)
	if errors.Is(err, job.ErrNotFound) {
		return nil // finished meanwhile
	}
	if err != nil {
		return err
	}
	body, err := json.Marshal(failedCallback(jb))
	if err != nil {
		return err
	}
	if done, err := job.Fail(ctx, tx, id, body, job.ErrorRepeatedFailure); err != nil || !done {
		return err
	}
	if err := usage.Bill(ctx, tx, id, nil, true); err != nil {
		return err
	}
	deliveryID, err := webhook.CreateDelivery(ctx, tx, jb.ID, jb.AccountID, jb.WebhookURL, jb.WebhookSecret, body)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	// As for a finished job: a delivery left unpublished is published by the outbox sweep.
	if err := webhook.Publish(ctx, j.js, j.Layout, deliveryID); err != nil {
		j.log.Warn("publish delivery", "delivery_id", deliveryID, "err", err)
	}
	return nil
}

// reprobe decides whether a job greylisted now gets another probe, and after how long: the delay
// the reply suggested (hint), else GreylistDelay doubled for every re-probe so far, cut to what
// is left of the window that started with the job's first greylisting reply. ok is false once
// the window or GreylistRetries is used up: the job then completes with the greylisted result.
func (j *JobRunner) reprobe(jb job.Job, hint time.Duration, now time.Time) (wait time.Duration, ok bool) {
	if j.GreylistWindow <= 0 || jb.Retries >= j.GreylistRetries {
		return 0, false
	}
	since := now
	if jb.RetryingSince != nil {
		since = *jb.RetryingSince
	}
	left := since.Add(j.GreylistWindow).Sub(now)
	if left <= 0 {
		return 0, false
	}
	wait = hint
	if wait <= 0 {
		wait = max(j.GreylistDelay, time.Millisecond) << min(jb.Retries, 16)
	}
	return min(wait, left), true
}

// verify runs the pipeline and turns a panic into an error, so one bad address fails its own
// job instead of the worker.
func (j *JobRunner) verify(ctx context.Context, email string) (r verdict.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("panic: %v", p)
			}
		}
	}()
	return j.pipe.Verify(ctx, email), nil
}

// errorType is the Go type name of err, the usage log's error_class for failed jobs.
func errorType(err error) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", err), "*")
}

// StuckAckWaits × AckWait is how long a processing job goes without an update before the sweep
// takes its message as lost. A runner gives a job at most one AckWait and two WriteBudgets (less
// than StuckAckWaits × AckWait with the defaults), and a redelivered message starts (and so
// updates) the job again, so a job still being worked on is never taken.
const StuckAckWaits = 5

// sweep re-queues jobs whose message seems lost (job.Store.Stale). Completing a job is guarded by
// its state and its usage row is keyed by the job, so a needless re-queue costs at most a second
// probe, and several replicas sweeping at once do no harm.
//
// A pending job keeps its creation's message id, so that the sweep adds nothing while the API's
// message is still queued. A retrying or processing job had a message once, whose id the stream
// may still hold within its duplicate window after the message itself was lost; its re-queue
// gets an id of its own, keyed by the job's last update so that every sweep (and every replica)
// until the job moves again publishes the same one.
func (j *JobRunner) sweep(ctx context.Context) {
	stale, err := j.jobs.Stale(ctx, j.SweepAge, StuckAckWaits*j.AckWait, 500)
	if err != nil {
		if ctx.Err() == nil {
			j.log.Warn("sweep: list stale jobs", "err", err)
		}
		return
	}
	for _, s := range stale {
		round := ""
		if s.State != job.Pending {
			round = "sweep." + strconv.FormatInt(s.UpdatedAt.UnixMicro(), 10)
		}
		if err := queue.RequeueJob(ctx, j.js, j.Layout, s.ID, round); err != nil {
			j.log.Warn("sweep: re-queue job", "job_id", s.ID, "state", s.State, "err", err)
			return
		}
		if s.State != job.Pending {
			j.log.Info("sweep: re-queued a job whose message was lost", "job_id", s.ID, "state", s.State)
		}
	}
}
