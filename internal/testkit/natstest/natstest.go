// Package natstest starts an embedded JetStream-enabled NATS server for a test, on a random
// loopback port with its store in a temporary directory, the way nats-server's own tests do.
package natstest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// Server starts a server that shuts down when t ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	s, err := queue.StartEmbedded(queue.EmbeddedOptions{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// URL starts a server and returns its client URL.
func URL(t testing.TB) string {
	t.Helper()
	return Server(t).ClientURL()
}

// Connect starts a server with Mailvet's streams created and returns a connection to it.
func Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectTo(t, URL(t))
}

// ConnectTo connects to the server at url directly (no proxy) and creates Mailvet's streams on
// it; the connection is closed when t ends.
func ConnectTo(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, js, queue.Layout{}, nil); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return nc, js
}

// Proxied starts a tcpproxy in front of the server at url and connects to the server through it
// as Mailvet's processes connect (queue.Connect: its reconnect and ping settings), for fault tests
// (Cut, Hold, Restore). The proxy and the connection are closed when t ends.
func Proxied(t testing.TB, url, name string) (*tcpproxy.Proxy, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	p, err := tcpproxy.Start(strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatalf("natstest: proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	nc, err := queue.Connect("nats://"+p.Addr(), name, queue.Auth{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("natstest: connect through the proxy: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return p, nc, js
}
