package queue_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

func TestEnsureStreamsIsIdempotent(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t) // creates the streams once
	_ = nc
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatalf("second EnsureStreams: %v", err)
	}
	for _, want := range queue.StreamConfigs(queue.Layout{}) {
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Storage != want.Storage {
			t.Errorf("%s: retention %v storage %v", want.Name, info.Config.Retention, info.Config.Storage)
		}
	}
}

// A server without JetStream stays "not enabled"; EnsureStreams keeps retrying until its
// context ends instead of failing at the first answer, and then says why.
func TestEnsureStreamsRetriesUntilContextEnds(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	s.DisableJetStream()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err == nil {
		t.Fatal("EnsureStreams succeeded without JetStream")
	}
	if took := time.Since(start); took < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("gave up after %v; want about the context's 700ms", took)
	}
}

// A token in NATS_URL (nats://TOKEN@host) is a credential: the start-up wait neither logs it nor
// returns it in its error (docs/operations.md, "Secrets").
func TestConnectWaitDoesNotLogTheToken(t *testing.T) {
	t.Parallel()
	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err := queue.ConnectWait(ctx, "nats://s3cr3ttoken@127.0.0.1:1, nats://ann:hunter2@127.0.0.1:2", "t", queue.Auth{}, log)
	if err == nil {
		t.Fatal("connected to nothing")
	}
	out := buf.String() + err.Error()
	if !strings.Contains(out, "waiting for NATS") {
		t.Fatalf("no wait logged:\n%s", out)
	}
	for _, secret := range []string{"s3cr3ttoken", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q leaked:\n%s", secret, out)
		}
	}
}
