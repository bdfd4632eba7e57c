package queue

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Consumer names: one durable work-queue consumer per stream, shared by every worker replica.
const (
	ConsumerVerifiers  = "verifiers"
	ConsumerJobRunners = "job-runners"
	ConsumerWebhooks   = "webhook-worker"
	ConsumerListChunks = "list-runners"
)

// VerifyItemsConsumer is the VERIFY consumer of a verifier worker that verifies concurrency
// addresses at a time. ackWait is short (the caller is waiting, and a dead worker's items should
// move on quickly); a worker that is still busy with an item says so with InProgress.
func VerifyItemsConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return workQueue(StreamVerify, ConsumerVerifiers, SubjectVerifyItems,
		"batch and stream items; answered on the reply subject in the item's header", concurrency, ackWait)
}

// JobsConsumer is the JOBS consumer of a job runner that runs concurrency jobs at a time.
// ackWait bounds one job: a runner that dies mid-job has its job redelivered after it. A job
// waiting for a greylisting re-probe (NakWithDelay, up to MAILVET_GREYLIST_WINDOW) still counts
// as pending, so MaxAckPending leaves room for JobsWaiting of those besides the jobs being worked
// on; the pull buffer (the runner's concurrency), not MaxAckPending, bounds what a runner takes.
func JobsConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	spec := workQueue(StreamJobs, ConsumerJobRunners, SubjectJobs,
		"asynchronous verification jobs; the job lives in Postgres; re-probes by NakWithDelay", concurrency, ackWait)
	spec.Config.MaxAckPending += JobsWaiting
	return spec
}

// JobsWaiting is the room the JOBS consumer keeps for jobs waiting for a re-probe.
const JobsWaiting = 10000

// WebhooksConsumer is the WEBHOOKS consumer of a worker that runs concurrency attempts at a time.
// ackWait must exceed one attempt (10 s) plus its bookkeeping. A message whose delivery is
// waiting out a retry backoff (NakWithDelay) still counts as pending, so the MaxAckPending of
// workQueue leaves room for those besides the messages being worked on; otherwise a burst of
// failing receivers would starve healthy ones. The attempt limit lives in Postgres.
func WebhooksConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return workQueue(StreamWebhooks, ConsumerWebhooks, SubjectWebhookDeliver,
		"webhook deliveries; attempts counted in Postgres, retries by NakWithDelay", concurrency, ackWait)
}

// ListChunksConsumer is the LISTS consumer of a list runner that verifies concurrency chunks at
// a time. ackWait bounds a chunk without a sign of life: the runner reports progress
// (InProgress) while it verifies, so only a runner that died lets its chunk go to another.
func ListChunksConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return workQueue(StreamLists, ConsumerListChunks, SubjectLists,
		"bulk-list chunks; results written in Postgres, idempotently per address", concurrency, ackWait)
}

// workQueue is a durable pull consumer of a work-queue stream, as every Mailvet worker uses one:
// explicit acks, unlimited redeliveries (each worker decides when to give up), and at most four
// times the worker's concurrency unacknowledged, so a slow fleet pushes back instead of piling
// work up in its buffers.
func workQueue(stream, durable, subject, description string, concurrency int, ackWait time.Duration) ConsumerSpec {
	return ConsumerSpec{Stream: stream, Config: jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   description,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 4 * max(1, concurrency),
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}}
}
