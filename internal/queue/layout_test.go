package queue_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

func TestLayoutNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l                     queue.Layout
		stream, subject, name string
	}{
		{queue.Layout{}, "VERIFY", "verify.sync", "verifiers"},
		{queue.Layout{Prefix: "staging"}, "staging_VERIFY", "staging.verify.sync", "staging_verifiers"},
	} {
		if got := tc.l.Name(queue.StreamVerify); got != tc.stream {
			t.Errorf("%+v stream %q, want %q", tc.l, got, tc.stream)
		}
		if got := tc.l.Subject(queue.SubjectVerifySync); got != tc.subject {
			t.Errorf("%+v subject %q, want %q", tc.l, got, tc.subject)
		}
		if got := tc.l.Name(queue.ConsumerVerifiers); got != tc.name {
			t.Errorf("%+v consumer %q, want %q", tc.l, got, tc.name)
		}
	}
	for _, cfg := range queue.StreamConfigs(queue.Layout{Prefix: "t1", Replicas: 3}) {
		if !strings.HasPrefix(cfg.Name, "t1_") || cfg.Replicas != 3 {
			t.Errorf("stream %s replicas %d", cfg.Name, cfg.Replicas)
		}
		for _, s := range cfg.Subjects {
			if !strings.HasPrefix(s, "t1.") {
				t.Errorf("stream %s subject %s", cfg.Name, s)
			}
		}
	}
}

// Two deployments on one NATS server, one unprefixed and one with MAILVET_NATS_PREFIX=staging,
// each with its streams (JetStream refuses two streams with overlapping subjects, so without the
// prefix the second deployment could not even start), and each one's job runner gets only its
// own deployment's jobs; a synchronous request of the staging API is not answered by the other
// deployment's verifier.
func TestLayoutsShareOneServerWithoutMeeting(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, staging := queue.Layout{}, queue.Layout{Prefix: "staging"}
	for _, l := range []queue.Layout{prod, staging} {
		if err := queue.EnsureStreams(ctx, js, l, nil); err != nil {
			t.Fatalf("streams of %+v: %v", l, err)
		}
	}

	jobs := map[string][]uuid.UUID{}
	for _, name := range []string{"prod", "staging"} {
		l := map[string]queue.Layout{"prod": prod, "staging": staging}[name]
		for range 3 {
			id := uuid.New()
			jobs[name] = append(jobs[name], id)
			if err := queue.PublishJob(ctx, js, l, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, l := range map[string]queue.Layout{"prod": prod, "staging": staging} {
		cons := queue.NewConsumer(js, queue.JobsConsumer(4, 5*time.Second), l, 4, quiet)
		if want := l.Name(queue.ConsumerJobRunners); cons.Name() != want {
			t.Errorf("%s consumer %q, want %q", name, cons.Name(), want)
		}
		var mu sync.Mutex
		var got []uuid.UUID
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cons.Run(rctx, func(m jetstream.Msg) {
				var jm queue.JobMessage
				_ = json.Unmarshal(m.Data(), &jm)
				_ = m.Ack()
				mu.Lock()
				got = append(got, jm.JobID)
				if len(got) == len(jobs[name]) {
					rcancel()
				}
				mu.Unlock()
			})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			rcancel()
			<-done
		}
		mu.Lock()
		if len(got) != len(jobs[name]) {
			t.Errorf("%s runner got %d jobs, want %d", name, len(got), len(jobs[name]))
		}
		for i, id := range got {
			if i < len(jobs[name]) && id != jobs[name][i] {
				t.Errorf("%s runner got job %s, not one of its deployment's (%v)", name, id, jobs[name])
			}
		}
		mu.Unlock()
	}

	// A verifier of the unprefixed deployment is listening; the staging API still finds none.
	sub, err := nc.QueueSubscribe(prod.Subject(queue.SubjectVerifySync), queue.QueueVerifiers, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"error":"busy"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()
	d := queue.NewDispatcher(nc, js, staging)
	defer d.Close()
	if _, err := d.VerifyOne(ctx, "ann@example.com"); !errors.Is(err, queue.ErrNoWorkers) {
		t.Errorf("staging VerifyOne with only a prod verifier: %v, want ErrNoWorkers", err)
	}
	if queue.NewDispatcher(nc, js, staging).WorkersAlive(ctx) {
		t.Error("staging sees prod's verifiers as alive")
	}
}

// NATS_URL may list several servers; the client goes past one that is down. TLS is verified
// against MAILVET_NATS_TLS_CA's file, and a connection error never shows the URL's password.
func TestConnectSeveralURLsTLSAndSecretsKeptOut(t *testing.T) {
	t.Parallel()
	ca := tlstest.New(t, "localhost")
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Username: "mailvet", Password: "s3cret-pw",
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.Leaf}, MinVersion: tls.VersionTLS12}}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer s.Shutdown()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	port := s.Addr().(*net.TCPAddr).Port
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downAddr := down.Addr().String()
	down.Close() // nothing listens there now

	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	urls := "tls://mailvet:s3cret-pw@" + downAddr + ", tls://mailvet:s3cret-pw@localhost:" + strconv.Itoa(port)
	nc, err := queue.Connect(urls, "layout-test", queue.Auth{TLSCAFile: caFile}, quiet)
	if err != nil {
		t.Fatalf("Connect with one server down: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil || !strings.HasSuffix(nc.ConnectedUrl(), ":"+strconv.Itoa(port)) {
		t.Errorf("connected to %s, TLS: %v", nc.ConnectedUrl(), err)
	}
	nc.Close()

	// Without the CA the server's certificate is refused, and the error names the servers
	// without the password.
	_, err = queue.Connect("tls://mailvet:s3cret-pw@localhost:"+strconv.Itoa(port), "layout-test", queue.Auth{}, quiet)
	if err == nil {
		t.Fatal("Connect trusted an unknown CA")
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
}
