// Package queue owns Mailvet's NATS layout: the subjects, the JetStream streams and their
// consumers, and the connection helpers every binary uses. Keeping the whole layout in this one
// file's neighbourhood means a change of topology is reviewed in one place (docs/architecture.md, "NATS layout").
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

	"github.com/mailvet/mailvet/internal/redact"
)

// Subjects and stream names (docs/architecture.md, "NATS layout").
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

	StreamLists  = "LISTS"
	SubjectLists = "lists.>"
)

// StreamConfigs returns the JetStream streams of layout l, with l's replicas copies each. Batch
// and stream items live in memory with a short MaxAge: their caller is waiting and gives up after
// its deadline, so keeping them longer only delays failure. Jobs and webhooks are durable on disk.
func StreamConfigs(l Layout) []jetstream.StreamConfig {
	cfgs := baseStreams(l.replicas())
	for i := range cfgs {
		cfgs[i].Name = l.Name(cfgs[i].Name)
		for j, s := range cfgs[i].Subjects {
			cfgs[i].Subjects[j] = l.Subject(s)
		}
	}
	return cfgs
}

// baseStreams are the streams with their base names and subjects.
func baseStreams(replicas int) []jetstream.StreamConfig {
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
		{
			// Bulk-list chunks: only a window of each list's chunks is here at a time (the rest
			// wait in Postgres), so the stream stays small however large the lists.
			Name:        StreamLists,
			Description: "bulk-list chunks to verify (the addresses live in Postgres)",
			Subjects:    []string{SubjectLists},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardNew,
			MaxMsgs:     1_000_000,
			Replicas:    replicas,
		},
	}
}

// EnsureStreams creates the streams, or updates them to the current configuration. It is safe to
// call from every replica at start-up. A NATS cluster that has just formed answers "unavailable"
// (or not at all) until it has elected its JetStream leader, so every error is retried with
// exponential backoff, and logged, until ctx ends: a process started before its cluster is ready
// waits for it instead of exiting. An answer that waiting cannot change (see permanent) ends the
// wait at once with what to do.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, l Layout, log *slog.Logger) error {
	for _, cfg := range StreamConfigs(l) {
		policy := backoff.NewExponentialBackOff()
		policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
		err := backoff.RetryNotify(func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := js.CreateOrUpdateStream(cctx, cfg)
			return permanent(err, l)
		}, backoff.WithContext(policy, ctx), func(err error, next time.Duration) {
			if log != nil {
				log.Warn("waiting for JetStream to create a stream", "stream", cfg.Name, "retry_in", next, "err", err)
			}
		})
		if err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, stopped(ctx, err))
		}
	}
	return nil
}

// JetStream API error codes (nats-server's errors.json) that no wait cures: the server or the
// account is set up so that it will refuse the same request again.
const (
	// errReplicasNotSupported: replicas > 1 asked of a server that is not part of a JetStream
	// cluster (JSStreamReplicasNotSupportedErr).
	errReplicasNotSupported jetstream.ErrorCode = 10074
	// errSubjectOverlap: another stream on the account already takes these subjects
	// (JSStreamSubjectOverlapErr), such as another deployment's without a prefix.
	errSubjectOverlap jetstream.ErrorCode = 10065
	// errInvalidConfig: the server refuses the stream or bucket configuration itself
	// (JSStreamInvalidConfigErr).
	errInvalidConfig jetstream.ErrorCode = 10052
)

// permanent marks an error of creating a stream or bucket that waiting cannot cure, so that the
// start-up retries (EnsureStreams, EnsureBucket) end at once with what to do instead of waiting
// forever (docs/operations.md, "Start-up and shutdown"). Anything else, including "no suitable
// peers" and "insufficient resources" from a cluster still forming, stays retryable.
func permanent(err error, l Layout) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errReplicasNotSupported:
		return backoff.Permanent(fmt.Errorf("MAILVET_STREAM_REPLICAS=%d, but this NATS server is not part of a JetStream cluster, so it keeps one copy of each stream: set MAILVET_STREAM_REPLICAS=1, or run a cluster of at least %d servers (docs/operations.md, \"Running on a NATS cluster\"): %w",
			l.replicas(), l.replicas(), err))
	case errSubjectOverlap:
		return backoff.Permanent(fmt.Errorf("another stream on this NATS account already takes these subjects (another deployment?): give each deployment its own MAILVET_NATS_PREFIX: %w", err))
	case errInvalidConfig:
		return backoff.Permanent(err)
	}
	return err
}

// How Connect's client tells a dead connection that stays open from a live one (see Connect).
const (
	PingInterval        = 2 * time.Second
	MaxPingsOutstanding = 2
)

// Connect dials NATS with settings suited to a long-running service: it never gives up
// reconnecting, and it logs (without credentials) when the connection drops and comes back.
//
// Nothing is buffered while the connection is down (ReconnectBufSize -1): a publish then fails at
// once instead of waiting in a buffer that a longer outage would lose anyway, so a request that
// needs the fleet answers 503 at once and a worker that cannot publish its answer leaves the item
// unacknowledged, to be redelivered. See docs/reliability.md.
//
// The client pings the server every PingInterval and drops a connection that leaves
// MaxPingsOutstanding pings unanswered, then reconnects (to another node of a cluster, if one
// answers). nats.go's defaults (2 minutes, 2) leave a black-holed connection, open but carrying
// nothing, in use for 4 to 6 minutes; ours drop it within 4 to 6 s, in every process, so workers
// recover as well as the API. Callers that must not wait even that long see such a connection
// down sooner through Link's probe.
//
// url may list several servers of a cluster, comma-separated: the client picks one and moves to
// another when it fails, and learns the rest of the cluster from the server it reached.
func Connect(url, name string, auth Auth, log *slog.Logger) (*nats.Conn, error) {
	opts := append(auth.options(),
		nats.Name(name),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOutstanding),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "server", c.ConnectedServerId())
		}),
		// Asynchronous errors, a slow consumer's dropped messages above all, are logged as the
		// rest is: nats.go's default prints them as plain text on stderr, where a fault campaign
		// found the only trace of a list chunk dropped after a reconnect.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats asynchronous error", "subject", subject, "err", err)
		}),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact.URL(url), err)
	}
	return nc, nil
}

// Auth is how a process proves itself to NATS and checks the servers, besides what the URL
// carries (user:password@ or a token@): a credentials file for clusters run with NATS accounts
// and JWTs, and TLS (a CA to trust, and a client certificate where the cluster requires one).
// The files are read when the connection is made, so rotated credentials are picked up at the
// next reconnect. See docs/operations.md, "NATS".
type Auth struct {
	CredsFile   string
	TLSCAFile   string
	TLSCertFile string
	TLSKeyFile  string
}

func (a Auth) options() []nats.Option {
	var opts []nats.Option
	if a.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(a.TLSCAFile))
	}
	if a.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(a.TLSCertFile, a.TLSKeyFile))
	}
	return opts
}

// ConnectWait is Connect for start-up: while no server answers it waits and tries again, with
// backoff and a log line per attempt, until ctx ends. Bad credentials are not waited for.
func ConnectWait(ctx context.Context, url, name string, auth Auth, log *slog.Logger) (*nats.Conn, error) {
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, 0
	var nc *nats.Conn
	err := backoff.RetryNotify(func() error {
		var err error
		nc, err = Connect(url, name, auth, log)
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(policy, ctx), func(err error, next time.Duration) {
		log.Warn("waiting for NATS", "url", redact.URL(url), "retry_in", next, "err", err)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for NATS at %s: %w", redact.URL(url), context.Cause(ctx))
		}
		return nil, err
	}
	return nc, nil
}

// stopped is the error of a start-up wait that ended: ctx's cause when ctx ended it, so that a
// stop signal reads as one and the binary exits 0 (docs/operations.md, "What you run"), else err.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Ready reports whether link's connection is up and JetStream answers, for /readyz. The link
// says so without waiting (Link.Up), also while a reconnect holds the connection.
func Ready(ctx context.Context, link *Link, js jetstream.JetStream) error {
	if !link.Up() {
		return errors.New("not connected to NATS")
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return nil
}
