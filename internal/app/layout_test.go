package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// A process with MAILVET_NATS_PREFIX and a NATS_URL whose first server is down connects to the
// second, creates its own prefixed streams there (and no unprefixed ones), and is ready.
func TestStartWithPrefixAndSeveralURLs(t *testing.T) {
	t.Parallel()
	natsURL := natstest.URL(t)
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "nats://" + down.Addr().String()
	down.Close()
	env := map[string]string{
		"DATABASE_URL": pgtest.URL(t), "NATS_URL": downURL + "," + natsURL, "MAILVET_NATS_PREFIX": "ci1",
		"MAILVET_METRICS_ADDR": "127.0.0.1:0", "MAILVET_DNS_RESOLVER": "127.0.0.1:53",
	}
	cfg, err := config.Load(config.RoleVerifier, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := app.Start(ctx, cfg, "test", app.NewLogger(io.Discard, "test"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(rctx) }()
	defer func() { stop(); <-done; in.Close() }()
	waitReady(t, in.OpsAddr(), http.StatusOK, 10*time.Second)
	if in.Layout != (queue.Layout{Prefix: "ci1", Replicas: 1}) {
		t.Errorf("layout %+v", in.Layout)
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	names := js.StreamNames(ctx)
	got := map[string]bool{}
	for n := range names.Name() {
		got[n] = true
	}
	for _, base := range []string{queue.StreamVerify, queue.StreamJobs, queue.StreamWebhooks, queue.StreamLists} {
		if !got["ci1_"+base] || got[base] {
			t.Errorf("streams %v: want ci1_%s and no %s", got, base, base)
		}
	}
}
