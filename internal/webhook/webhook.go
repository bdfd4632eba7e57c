// Package webhook delivers the results of asynchronous verifications to the callers' HTTPS URLs
// (docs/api.md, "Asynchronous verification"): the URL rules checked at request time, HMAC-SHA256 signatures, the outbox that the
// verifier worker writes to, an SSRF-safe HTTP client, the retry schedule driven by JetStream, the
// delivery log in Postgres with its retention, and replay of failed deliveries.
//
// A delivery lives in Postgres (deliveries, delivery_attempts); the WEBHOOKS stream only carries
// its id. Postgres is therefore the single source of truth for how many attempts were made, so a
// crashed or redelivered message can neither lose an attempt nor exceed the limit of three.
//
// When an asynchronous verification itself fails, the verifier worker builds the callback body
// (the verify result with status "unknown", valid false, job_id and error "internal"); this package
// sends the stored bytes like any other body and never looks inside them.
package webhook

import "github.com/mailvet/mailvet/internal/database"

// DB is the one database interface of Mailvet's stores (database.DB): a pool, a connection or a
// transaction.
type DB = database.DB

// Delivery states as stored in deliveries.state.
const (
	// StatePending: no attempt has been made yet.
	StatePending = "pending"
	// StateRetrying: at least one attempt was made (or is in flight) and more may follow.
	StateRetrying = "retrying"
	// StateDelivered: an attempt got a 2xx answer. Final.
	StateDelivered = "delivered"
	// StateFailed: the attempts are used up or the failure was final. Final.
	StateFailed = "failed"
)

// MaxAttempts is the number of attempts per delivery (docs/api.md, "Retries").
const MaxAttempts = 3
