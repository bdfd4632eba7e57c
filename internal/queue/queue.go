// Package queue owns Mailvet's NATS layout: the subjects, the JetStream streams and their
// consumers, and the connection helpers every binary uses. Keeping the whole layout in this one
// file's neighbourhood means a change of topology is reviewed in one place (DESIGN.md §1).
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Subjects and stream names of DESIGN.md §1.
const (
	// SubjectVerifySync is the core request/reply subject for one synchronous address; verifier
	// workers answer it in the queue group QueueVerifiers.
	SubjectVerifySync = "verify.sync"
	QueueVerifiers    = "verifiers"

	StreamVerify       = "VERIFY"
	SubjectVerifyItems = "verify.item.>"

	StreamJobs  = "JOBS"
	SubjectJobs = "jobs.>"

	StreamWebhooks  = "WEBHOOKS"
	SubjectWebhooks = "webhooks.>"
)

// StreamConfigs returns the JetStream streams with replicas copies each. Batch and stream items
// live in memory with a short MaxAge: their caller is waiting and gives up after its deadline, so
// keeping them longer only delays failure. Jobs and webhooks are durable on disk.
func StreamConfigs(replicas int) []jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	return []jetstream.StreamConfig{
		{
			Name:        StreamVerify,
			Description: "batch and stream verification items (reply inbox in a header)",
			Subjects:    []string{SubjectVerifyItems},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.MemoryStorage,
			MaxAge:      2 * time.Minute,
			Discard:     jetstream.DiscardNew,
			MaxMsgs:     100_000,
			Replicas:    replicas,
		},
		{
			Name:        StreamJobs,
			Description: "asynchronous verification jobs",
			Subjects:    []string{SubjectJobs},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardNew,
			MaxMsgs:     10_000_000,
			Replicas:    replicas,
		},
		{
			Name:        StreamWebhooks,
			Description: "completed async results to deliver, and replays",
			Subjects:    []string{SubjectWebhooks},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardNew,
			MaxMsgs:     10_000_000,
			Replicas:    replicas,
		},
	}
}

// EnsureStreams creates the streams, or updates them to the current configuration. It is safe to
// call from every replica at start-up. On a cluster that is still electing its JetStream leader
// the API answers "unavailable" for a few seconds, so each stream is retried with exponential
// backoff until ctx ends.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, cfg := range StreamConfigs(replicas) {
		policy := backoff.NewExponentialBackOff()
		policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 100*time.Millisecond, 2*time.Second, 0
		err := backoff.Retry(func() error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			if err != nil && !transient(err) {
				return backoff.Permanent(err)
			}
			return err
		}, backoff.WithContext(policy, ctx))
		if err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// transient reports whether a JetStream API error may go away by itself (no leader yet, no
// answer in time) rather than being a configuration mistake.
func transient(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}

// Connect dials NATS with settings suited to a long-running service: it never gives up
// reconnecting, and it logs (without credentials) when the connection drops and comes back.
func Connect(url, name string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "server", c.ConnectedServerId())
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(url), err)
	}
	return nc, nil
}

// Ready reports whether nc is connected and JetStream answers, for /readyz.
func Ready(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	if nc == nil || !nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return nil
}
