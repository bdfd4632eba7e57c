package verifier

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Services returns the long-running parts of a verifier worker — the sync/batch worker and the
// async job runner — for app.Infra.Run. The verifier binary and `api -dev` run the same parts.
func Services(pool *pgxpool.Pool, nc *nats.Conn, js jetstream.JetStream, pipe Pipeline, log *slog.Logger, reg prometheus.Registerer) []func(context.Context) error {
	w := New(nc, js, pipe, log, reg, Options{})
	jobs := NewJobRunner(pool, js, pipe, log)
	return []func(context.Context) error{w.Run, jobs.Run}
}
