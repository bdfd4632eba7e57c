package queue

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerWebhooks is the durable pull consumer every webhook-worker replica shares.
const ConsumerWebhooks = "webhook-worker"

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
