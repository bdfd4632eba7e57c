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
)

// VerifyItemsConsumer is the VERIFY consumer of a verifier worker that verifies concurrency
// addresses at a time. ackWait is short (the caller is waiting, and a dead worker's items should
// move on quickly); a worker that is still busy with an item says so with InProgress.
func VerifyItemsConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return ConsumerSpec{Stream: StreamVerify, Config: jetstream.ConsumerConfig{
		Durable:       ConsumerVerifiers,
		Description:   "batch and stream items; answered on the reply subject in the item's header",
		FilterSubject: SubjectVerifyItems,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 4 * max(1, concurrency),
		MaxDeliver:    -1,
	}}
}

// JobsConsumer is the JOBS consumer of a job runner that runs concurrency jobs at a time.
// ackWait bounds one job: a runner that dies mid-job has its job redelivered after it.
func JobsConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return ConsumerSpec{Stream: StreamJobs, Config: jetstream.ConsumerConfig{
		Durable:       ConsumerJobRunners,
		Description:   "asynchronous verification jobs; the job lives in Postgres",
		FilterSubject: SubjectJobs,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 4 * max(1, concurrency),
		MaxDeliver:    -1,
	}}
}

// WebhookConsumerConfig is the WEBHOOKS consumer for a worker that runs concurrency attempts at a
// time. ackWait must exceed one attempt (10 s) plus its bookkeeping. A message whose delivery is
// waiting out a retry backoff (NakWithDelay) still counts as pending, so MaxAckPending leaves room
// for those besides the messages being worked on; otherwise a burst of failing receivers would
// starve healthy ones. Redeliveries are unlimited: the attempt limit lives in Postgres.
func WebhookConsumerConfig(concurrency int, ackWait time.Duration) jetstream.ConsumerConfig {
	if concurrency < 1 {
		concurrency = 1
	}
	return jetstream.ConsumerConfig{
		Durable:       ConsumerWebhooks,
		Description:   "webhook deliveries; attempts counted in Postgres, retries by NakWithDelay",
		FilterSubject: SubjectWebhookDeliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * concurrency,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// WebhooksConsumer is WebhookConsumerConfig as a ConsumerSpec.
func WebhooksConsumer(concurrency int, ackWait time.Duration) ConsumerSpec {
	return ConsumerSpec{Stream: StreamWebhooks, Config: WebhookConsumerConfig(concurrency, ackWait)}
}
