package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// HTTPServer is an HTTP server that shuts down gracefully when its context ends.
type HTTPServer struct {
	HTTP *http.Server
	ln   net.Listener
}

// Listen binds addr now, so a port clash fails start-up instead of surfacing later.
func Listen(addr string, h http.Handler) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &HTTPServer{
		HTTP: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second},
		ln:   ln,
	}, nil
}

// CheckListen binds addr and lets it go at once: a process that binds its listener only after
// waiting for its dependencies checks first that it will be able to (a port another process
// holds, an address that is not this host's), so that waiting cannot hide the mistake.
func CheckListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// Addr is the bound address (useful with port 0).
func (s *HTTPServer) Addr() string { return s.ln.Addr().String() }

// Serve runs until ctx ends, then gives in-flight requests up to grace to finish.
func (s *HTTPServer) Serve(ctx context.Context, grace time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- s.HTTP.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.HTTP.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "addr", s.Addr(), "err", err)
		_ = s.HTTP.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
