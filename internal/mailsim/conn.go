package mailsim

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// simConn is the server side of one SMTP connection. It adds latency as a delay line rather than
// a sleep per write: bytes written at t reach the client at t+delay, so replies to pipelined
// commands arrive together one round trip later, exactly as on a real long link. It also keeps
// the per-connection counters that survive STARTTLS (Postfix does not forget errors on TLS).
type simConn struct {
	net.Conn
	srv   *Server
	delay time.Duration
	hold  time.Time // nothing is delivered before this instant (a slow banner)

	mu     sync.Mutex // guards closed and sending on queue
	closed bool
	queue  chan chunk
	done   chan struct{}
	once   sync.Once
	gone   sync.Once // the client has left: counted out of the concurrent sessions once

	client netip.Addr // the client's address, for MaxConnsPerClient

	wroteSinceRead atomic.Bool
	rejected       atomic.Int64 // rejected recipients in this connection
	errors         atomic.Int64 // rejected commands in this connection
	hangup         atomic.Bool  // close the connection once the next reply is written
}

type chunk struct {
	b  []byte
	at time.Time
}

func newSimConn(c net.Conn, srv *Server, delay time.Duration, hold time.Time) *simConn {
	sc := &simConn{Conn: c, srv: srv, delay: delay, hold: hold, queue: make(chan chunk, 4096), done: make(chan struct{})}
	go sc.deliver()
	return sc
}

func (c *simConn) deliver() {
	defer close(c.done)
	for ch := range c.queue {
		if d := time.Until(ch.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := c.Conn.Write(ch.b); err != nil {
			// The client has gone; drain so that writers never block.
			for range c.queue {
			}
			return
		}
	}
}

// Write queues b for delivery one delay later and returns at once.
func (c *simConn) Write(b []byte) (n int, err error) {
	if c.srv.opts.NoPipelining && bytes.Equal(b, []byte("250-PIPELINING\r\n")) {
		// go-smtp always advertises PIPELINING and writes one line per Write; hide it.
		return len(b), nil
	}
	at := time.Now().Add(c.delay)
	if h := c.hold.Add(c.delay); at.Before(h) {
		at = h
	}
	c.wroteSinceRead.Store(true)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.queue <- chunk{b: bytes.Clone(b), at: at}
	c.mu.Unlock()
	if c.hangup.Load() && bytes.HasPrefix(b, []byte("421")) {
		// The server's last word: deliver it and hang up, as Postfix does at its hard error limit.
		go c.Close()
	}
	return len(b), nil
}

// hangUp makes the next 421 reply the connection's last.
func (c *simConn) hangUp() {
	if !c.hangup.Swap(true) {
		c.srv.stats.disconnects.Add(1)
	}
}

// turnAway answers the connection with r as its banner and closes it.
func (c *simConn) turnAway(r Reply) {
	c.srv.stats.disconnects.Add(1)
	c.Write([]byte(r.String() + "\r\n"))
	c.Close()
}

// left ends the connection's count as open, once.
func (c *simConn) left() { c.gone.Do(func() { c.srv.clientLeft(c.client) }) }

// Read counts a round trip whenever the client sends something after the server has replied:
// the client had to wait for that reply. A lone QUIT is not counted, since clients need not
// wait for its reply.
func (c *simConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	quit := n > 0 && bytes.HasSuffix(bytes.ToUpper(b[:n]), []byte("QUIT\r\n"))
	if n > 0 && c.wroteSinceRead.Swap(false) && !bytes.EqualFold(b[:n], []byte("QUIT\r\n")) {
		c.srv.stats.roundTrips.Add(1)
	}
	if quit || err != nil {
		// A client that sent QUIT or hung up has ended the session from its side; the server's
		// own tidying up (delivering the last reply) must not count as a session still open.
		c.left()
	}
	return n, err
}

// Close delivers what is still queued (at most one delay later), then closes.
func (c *simConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.queue)
		c.mu.Unlock()
		select {
		case <-c.done:
		case <-time.After(c.delay + time.Second):
		}
		c.left()
	})
	return c.Conn.Close()
}
