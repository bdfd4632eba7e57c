// Package acceptor is a loopback TCP listener for tests that must show a connection was NOT
// made: it accepts and closes every connection and counts them.
package acceptor

import (
	"net"
	"sync/atomic"
	"testing"
)

// Acceptor counts the connections made to it.
type Acceptor struct {
	ln       net.Listener
	accepted atomic.Int64
}

// Start listens on 127.0.0.1 on a free port until t ends.
func Start(t testing.TB) *Acceptor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &Acceptor{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			c.Close()
		}
	}()
	return a
}

// Addr is the listen address (host:port).
func (a *Acceptor) Addr() string { return a.ln.Addr().String() }

// Accepted is how many connections were made so far.
func (a *Acceptor) Accepted() int64 { return a.accepted.Load() }

// Port is the listen port.
func (a *Acceptor) Port() int { return a.ln.Addr().(*net.TCPAddr).Port }
