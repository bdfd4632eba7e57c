package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
)

// CreateDelivery records a delivery of body to url for a finished job, inside the verifier
// worker's job-completion transaction, so the result and the duty to deliver it commit together.
// body is stored byte for byte and is exactly what will be sent. secret is the job's webhook
// secret as stored, sealed (internal/sealed), or "" for an unsigned delivery: it is stored on the
// delivery unopened, so the verifier worker needs no key, and the webhook worker opens it to sign
// each attempt. After the commit the caller calls Publish; if it crashes first, the worker's
// outbox sweep publishes the delivery.
//
// Why the delivery keeps the sealed secret rather than signatures computed here: the Standard
// Webhooks signature covers the attempt's own timestamp (docs/api.md, "Signature"), which a
// retry minutes later or a replay hours later must renew, or receivers would reject it as a
// replay. The secret is erased as soon as no attempt can need it any more: when the delivery, or
// a replay of it, is delivered (finish). A failed delivery keeps it, still sealed, until
// retention removes the row, because it may be replayed (docs/reliability.md, "Webhook secrets at
// rest").
func CreateDelivery(ctx context.Context, tx pgx.Tx, jobID, accountID uuid.UUID, url string, secret string, body []byte) (uuid.UUID, error) {
	return createDelivery(ctx, tx, "job_id", jobID, accountID, url, secret, body)
}

// CreateListDelivery is CreateDelivery for a bulk list's completion callback (docs/lists.md).
func CreateListDelivery(ctx context.Context, tx pgx.Tx, listID, accountID uuid.UUID, url string, secret string, body []byte) (uuid.UUID, error) {
	return createDelivery(ctx, tx, "list_id", listID, accountID, url, secret, body)
}

// createDelivery stores a delivery for subject, whose id goes in column (job_id or list_id).
func createDelivery(ctx context.Context, tx pgx.Tx, column string, subject, accountID uuid.UUID, url string, secret string, body []byte) (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, err
	}
	var sec *string
	if secret != "" {
		sec = &secret
	}
	if body == nil {
		body = []byte{}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO deliveries (id, `+column+`, account_id, url, body, webhook_secret)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, subject, accountID, url, body, sec)
	if err != nil {
		return uuid.Nil, fmt.Errorf("create delivery: %w", err)
	}
	return id, nil
}

// Publish asks the webhook workers to attempt a delivery. The message id is the delivery id, so a
// second publish within the stream's duplicate window (the verifier retrying, the sweep racing
// it) is dropped by JetStream; a later duplicate is harmless because attempts are claimed in
// Postgres.
//
// A publish waits at most PublishTimeout, whatever ctx allows: the delivery is already committed,
// so a publish that JetStream does not confirm in time is left to the sweep rather than held for
// the caller's whole budget (a verifier stopping while its NATS node is gone would otherwise wait
// out its job's AckWait here).
func Publish(ctx context.Context, js jetstream.JetStream, l queue.Layout, deliveryID uuid.UUID) error {
	return publish(ctx, js, l, deliveryID, deliveryID.String())
}

// publish is Publish under message id msgID.
func publish(ctx context.Context, js jetstream.JetStream, l queue.Layout, deliveryID uuid.UUID, msgID string) error {
	data, err := json.Marshal(queue.DeliveryMessage{DeliveryID: deliveryID})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	if _, err := js.Publish(ctx, l.Subject(queue.SubjectWebhookDeliver), data, jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("publish delivery %s: %w", deliveryID, err)
	}
	return nil
}

// PublishTimeout bounds one Publish.
const PublishTimeout = time.Second

// Sweep publishes, at most limit of them, the deliveries whose message seems lost, and returns
// how many it published:
//   - pending deliveries without any attempt olderThan after they were created or last swept (the
//     verifier died between its commit and its publish);
//   - retrying deliveries whose next attempt was due more than olderThan ago and that were not
//     swept in the last olderThan: the message that was to come back when the backoff (or the
//     lease of an interrupted attempt) ran out is gone, e.g. NATS restarted with an empty store.
//     Without this they would stay retrying forever, never attempted again and never failed.
//
// The rows are claimed with FOR UPDATE SKIP LOCKED and their updated_at is bumped, so several
// worker replicas sweeping at once split the work instead of publishing the same rows, and a row
// is published again only olderThan after its last sweep.
//
// A pending delivery never attempted keeps its message id (the delivery id), so that the sweep adds
// nothing while the verifier's own publish is still queued. A delivery attempted before (retrying,
// or pending after a first attempt cut off by a crash) had a message once, whose id the
// stream may still hold within its duplicate window after the message itself was lost; it is
// republished under an id of its own, keyed by this sweep's updated_at. If its old message was
// not lost after all (a worker fleet that was down longer than olderThan), the duplicate is
// harmless: the worker's claim takes an attempt only when next_attempt_at has passed and then
// moves it to the end of the attempt's lease, so the second message finds the delivery leased or
// in backoff and waits, and never causes a parallel or an extra attempt.
func Sweep(ctx context.Context, db DB, js jetstream.JetStream, l queue.Layout, olderThan time.Duration, limit int) (int, error) {
	rows, err := db.Query(ctx, `
		UPDATE deliveries SET updated_at = now()
		WHERE id IN (
			SELECT id FROM deliveries
			WHERE updated_at < now() - $1 * interval '1 millisecond'
			  AND (state = 'pending' AND attempts = 0
			       OR state IN ('pending', 'retrying') AND attempts > 0
			          AND coalesce(next_attempt_at, updated_at) < now() - $1 * interval '1 millisecond')
			ORDER BY updated_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING id, attempts > 0, updated_at`, olderThan.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	type swept struct {
		id        uuid.UUID
		attempted bool // it had a message once: pending with an attempt cut off by a crash, or retrying
		updatedAt time.Time
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (swept, error) {
		var s swept
		err := r.Scan(&s.id, &s.attempted, &s.updatedAt)
		return s, err
	})
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	n := 0
	for _, s := range found {
		msgID := s.id.String()
		if s.attempted {
			msgID += ".sweep." + strconv.FormatInt(s.updatedAt.UnixMicro(), 10)
		}
		if err := publish(ctx, js, l, s.id, msgID); err != nil {
			// The row was bumped; the next sweep after olderThan tries it again.
			return n, err
		}
		n++
	}
	return n, nil
}
