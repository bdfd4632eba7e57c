package queue_test

import (
	"context"
	"errors"
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

// withoutJetStream is a JetStream client of a NATS server with JetStream disabled.
func withoutJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	s := natstest.Server(t)
	s.DisableJetStream()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return js
}

// A server without JetStream stays "not enabled"; EnsureStreams keeps retrying until its
// context ends instead of failing at the first answer, and then says why.
func TestEnsureStreamsRetriesUntilContextEnds(t *testing.T) {
	t.Parallel()
	js := withoutJetStream(t)
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

// A start-up wait ended by a stop signal says so: its error carries the context's cause, which
// the binaries exit 0 for (app.ExitCode; docs/operations.md, "What you run"), whether it waited
// for a NATS server or for JetStream to create the streams.
func TestStartUpWaitsEndWithTheStopsCause(t *testing.T) {
	t.Parallel()
	js := withoutJetStream(t)
	stop := errors.New("terminated signal received")
	for name, wait := range map[string]func(context.Context) error{
		"ConnectWait": func(ctx context.Context) error {
			_, err := queue.ConnectWait(ctx, "nats://127.0.0.1:1", "t", queue.Auth{}, slog.New(slog.DiscardHandler))
			return err
		},
		"EnsureStreams": func(ctx context.Context) error { return queue.EnsureStreams(ctx, js, queue.Layout{}, nil) },
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
		if err := wait(ctx); !errors.Is(err, stop) {
			t.Errorf("%s stopped by a signal: %v; want the signal as its cause", name, err)
		}
	}
}

// A token in NATS_URL (nats://TOKEN@host) is a credential: the start-up wait neither logs it nor
// returns it in its error (docs/operations.md, "Logs").
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

// A slow consumer's dropped messages are logged as a structured warning naming the subject,
// not left to nats.go's plain line on stderr.
func TestSlowConsumerIsLogged(t *testing.T) {
	t.Parallel()
	var buf logtest.Buffer
	nc, err := queue.Connect(natstest.URL(t), "t", queue.Auth{}, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	full := make(chan *nats.Msg, 1) // never read: the second message overflows it
	if _, err := nc.ChanSubscribe("slow.subject", full); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := nc.Publish("slow.subject", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; !strings.Contains(buf.String(), `"subject":"slow.subject"`); i++ {
		if i == 200 {
			t.Fatalf("no warning for the slow consumer:\n%s", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := buf.String(); !strings.Contains(out, "nats asynchronous error") || !strings.Contains(out, "slow consumer") {
		t.Fatalf("warning: %s", out)
	}
}

// Replicas that a single server cannot keep are a configuration mistake, not a cluster still
// forming: EnsureStreams and EnsureBucket end at once with an error naming the variable instead of
// waiting for ctx (docs/operations.md, "Start-up and shutdown").
func TestEnsureStreamsRefusesReplicasWithoutCluster(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(natstest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	l := queue.Layout{Replicas: 3}
	for what, ensure := range map[string]func(context.Context) error{
		"streams": func(ctx context.Context) error { return queue.EnsureStreams(ctx, js, l, nil) },
		"bucket": func(ctx context.Context) error {
			_, err := queue.EnsureBucket(ctx, js, l, queue.BucketCatchAll, time.Minute, nil)
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		err := ensure(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: created with 3 replicas on a single server", what)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: gave up after %v; want at once", what, took)
		}
		if !strings.Contains(err.Error(), "MAILVET_STREAM_REPLICAS=3") {
			t.Errorf("%s: error does not name MAILVET_STREAM_REPLICAS=3: %v", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
}

// Another stream that already takes Mailvet's subjects (another deployment on the account without
// a prefix) is not cured by waiting either: EnsureStreams ends at once pointing at the prefix.
func TestEnsureStreamsRefusesOverlappingSubjects(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(natstest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{queue.SubjectJobs}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = queue.EnsureStreams(ctx, js, queue.Layout{}, nil)
	if err == nil || !strings.Contains(err.Error(), "MAILVET_NATS_PREFIX") {
		t.Fatalf("error %v, want one naming MAILVET_NATS_PREFIX", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("gave up after %v; want at once", took)
	}
	if err := queue.EnsureStreams(ctx, js, queue.Layout{Prefix: "other"}, nil); err != nil {
		t.Errorf("with a prefix: %v", err)
	}
}
