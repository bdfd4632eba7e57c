package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
)

// CreateDelivery records a delivery of body to url for a finished job, inside the verifier
// worker's job-completion transaction, so the result and the duty to deliver it commit together.
// body is stored byte for byte and is exactly what will be sent; when secret is not empty the
// signature is computed once here, so replays carry the identical header. After the commit the
// caller calls Publish; if it crashes first, the worker's outbox sweep publishes the delivery.
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
	var sig *string
	if secret != "" {
		s := Sign([]byte(secret), body)
		sig = &s
	}
	if body == nil {
		body = []byte{}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO deliveries (id, `+column+`, account_id, url, body, signature)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, subject, accountID, url, body, sig)
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
// the caller's whole budget (a verifier stopping while its NATS node was gone used to wait out
// its job's AckWait here).
func Publish(ctx context.Context, js jetstream.JetStream, l queue.Layout, deliveryID uuid.UUID) error {
	data, err := json.Marshal(queue.DeliveryMessage{DeliveryID: deliveryID})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	if _, err := js.Publish(ctx, l.Subject(queue.SubjectWebhookDeliver), data, jetstream.WithMsgID(deliveryID.String())); err != nil {
		return fmt.Errorf("publish delivery %s: %w", deliveryID, err)
	}
	return nil
}

// PublishTimeout bounds one Publish.
const PublishTimeout = time.Second

// Sweep publishes deliveries that are still pending without any attempt olderThan after they
// were created or last swept, at most limit of them, and returns how many it published. The rows
// are claimed with FOR UPDATE SKIP LOCKED and their updated_at is bumped, so several worker
// replicas sweeping at once split the work instead of publishing the same rows.
func Sweep(ctx context.Context, db DB, js jetstream.JetStream, l queue.Layout, olderThan time.Duration, limit int) (int, error) {
	rows, err := db.Query(ctx, `
		UPDATE deliveries SET updated_at = now()
		WHERE id IN (
			SELECT id FROM deliveries
			WHERE state = 'pending' AND attempts = 0
			  AND updated_at < now() - $1 * interval '1 millisecond'
			ORDER BY updated_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING id`, olderThan.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	n := 0
	for _, id := range ids {
		if err := Publish(ctx, js, l, id); err != nil {
			// The row was bumped; the next sweep after olderThan tries it again.
			return n, err
		}
		n++
	}
	return n, nil
}
