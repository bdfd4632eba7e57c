package queue

import (
	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/verdict"
)

// Subjects of individual messages. Batch items carry their batch id in the subject so a consumer
// could be filtered per batch if ever needed; jobs and webhooks carry their row id.
const (
	// SubjectVerifyItemPrefix + batch id + "." + index.
	SubjectVerifyItemPrefix = "verify.item."
	// SubjectJob is where async jobs are published (one message per job).
	SubjectJob = "jobs.verify"
	// SubjectWebhookDeliver is where deliveries to attempt are published (one per delivery).
	SubjectWebhookDeliver = "webhooks.deliver"
	// SubjectListChunk is where bulk-list chunks are published (one message per chunk).
	SubjectListChunk = "lists.chunk"
)

// Headers used on verification messages.
const (
	// HeaderReply carries the API replica's inbox for a batch or stream item: JetStream
	// messages have no reply subject of their own, and the item must outlive a worker crash.
	HeaderReply = "Mailvet-Reply"
	// HeaderDeadline is the Unix-millisecond time after which the waiting caller has given up;
	// a worker drops (acks) expired items instead of probing for nobody.
	HeaderDeadline = "Mailvet-Deadline"
	// HeaderHeartbeat, on a verify.sync request, is how often (in milliseconds) the caller wants
	// to hear that the worker which took it is still at work: a caller that hears nothing for a
	// few of these asks another worker (Dispatcher.VerifyOne).
	HeaderHeartbeat = "Mailvet-Heartbeat"
	// HeaderWorking marks a worker's heartbeat on a verify.sync reply inbox: no body, not an
	// answer.
	HeaderWorking = "Mailvet-Working"
)

// VerifyRequest is the body of a verify.sync request and of a VERIFY stream item.
type VerifyRequest struct {
	Email string `json:"email"`
	// Index is the item's position in its batch; it lets the API put results in input order.
	Index int `json:"index,omitempty"`
}

// JobMessage is the body of a JOBS stream message; the job itself lives in Postgres.
type JobMessage struct {
	JobID uuid.UUID `json:"job_id"`
}

// ChunkMessage is the body of a LISTS stream message: one chunk of a bulk list, whose addresses
// live in Postgres.
type ChunkMessage struct {
	ListID uuid.UUID `json:"list_id"`
	Chunk  int       `json:"chunk"`
}

// DeliveryMessage is the body of a WEBHOOKS stream message; the delivery lives in Postgres.
type DeliveryMessage struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
}

// VerifyReply answers a VerifyRequest, on the request/reply inbox or the batch's reply subject.
type VerifyReply struct {
	Index  int             `json:"index"`
	Result *verdict.Result `json:"result,omitempty"`
	// Error is set instead of Result when the worker could not take the request ("busy").
	Error string `json:"error,omitempty"`
}

// ReplyBusy tells the API that this worker is saturated; the API answers 503.
const ReplyBusy = "busy"
