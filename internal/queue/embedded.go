package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configure an in-process NATS server.
type EmbeddedOptions struct {
	// StoreDir holds the JetStream file store.
	StoreDir string
	// Port to listen on, on 127.0.0.1; -1 picks a free port.
	Port int
}

// StartEmbedded runs a JetStream-enabled NATS server inside this process: the store of `make run`
// and of the tests. The caller shuts it down with Shutdown and WaitForShutdown.
func StartEmbedded(opts EmbeddedOptions) (*server.Server, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("embedded NATS needs a store directory")
	}
	port := opts.Port
	if port == 0 {
		port = -1
	}
	s, err := server.NewServer(&server.Options{
		ServerName:         "mailvet-embedded",
		Host:               "127.0.0.1",
		Port:               port,
		JetStream:          true,
		StoreDir:           opts.StoreDir,
		JetStreamMaxMemory: 256 << 20,
		NoLog:              true,
		NoSigs:             true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded NATS did not become ready within 10s")
	}
	return s, nil
}
