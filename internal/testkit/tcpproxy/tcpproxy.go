// Package tcpproxy is a loopback TCP proxy for fault tests: put it between a process and a real
// dependency (Postgres, NATS, an SMTP server), then Cut (or Hold) and Restore the link, or Pause
// and Resume it, to watch the process notice an outage and recover, without stopping the shared
// server itself; or CutAfter a given request, to lose the answer to a request the dependency
// received; or act at the moment a request leaves (BeforeSend), before the dependency sees it.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards connections from a loopback listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	// held is set while a Hold lasts; release is closed when it ends (Restore, Cut or Close).
	held    atomic.Bool
	release chan struct{}

	// paused is closed when a Pause ends (Resume, Cut or Close); nil when there is none.
	paused chan struct{}

	// cutAfter is the armed CutAfter; nil when none is armed.
	cutAfter *cutRule
	// beforeSend is the BeforeSend hook; nil when none is set.
	beforeSend func(chunk []byte)
}

// Start listens on 127.0.0.1 on a free port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every open connection and makes new ones close at once, as when the dependency dies.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.endHold()
	p.endPause()
	for c := range p.conns {
		c.Close()
	}
}

// Hold black-holes the link, as a network partition does: open connections stay open but no
// byte passes in either direction from now on, nor does a close; new connections are accepted
// and then hear nothing. Bytes the proxy had already read when Hold was called may still be
// delivered. Restore ends the hold; Cut ends it too, dropping every connection.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release == nil {
		p.release = make(chan struct{})
	}
	p.held.Store(true)
}

// Restore lets connections through again. After a Hold, the connections open during it are
// closed, as their streams lost bytes; new connections are forwarded as before.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if p.endHold() {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Pause stalls the link without losing a byte, as a network partition that heals does (TCP
// keeps what was sent and delivers it late): connections stay open, nothing passes in either
// direction until Resume, and then everything sent meanwhile is delivered, in order, on the same
// connections. Cut (or Close) ends a pause too.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

// Resume ends a Pause: what waited is delivered, and the connections go on as before.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endPause()
}

// CutAfter arms a one-time cut of one connection: the first on which match reports true for
// what its client has sent since CutAfter was called (up to and including the chunk just read)
// loses its client side before that chunk is passed on, and the chunk then reaches the target,
// followed by the end of the stream. The target acts on a request whose answer no one hears, as
// when a link breaks just after a COMMIT left: the client sees its connection fail, and cannot
// tell whether the request took effect. Other connections are left alone.
func (p *Proxy) CutAfter(match func(sent []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAfter = &cutRule{match: match}
}

// BeforeSend sets hook to be called with each chunk a client sends, before the chunk is passed on
// and while that connection's client side waits: whatever hook does happens before the target
// sees the chunk. The chunk is only valid during the call; a request may span several. nil
// removes the hook.
func (p *Proxy) BeforeSend(hook func(chunk []byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeSend = hook
}

func (p *Proxy) sendHook() func(chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beforeSend
}

// cutRule is one CutAfter.
type cutRule struct{ match func(sent []byte) bool }

// armedCut returns the armed CutAfter, or nil.
func (p *Proxy) armedCut() *cutRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutAfter
}

// takeCut disarms r if it is still armed, and reports whether it was: one connection is cut.
func (p *Proxy) takeCut(r *cutRule) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cutAfter != r {
		return false
	}
	p.cutAfter = nil
	return true
}

// endPause ends a pause, if one lasts. p.mu must be held.
func (p *Proxy) endPause() {
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

// pausing returns the channel closed at the end of the current pause, or nil when there is none.
func (p *Proxy) pausing() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// endHold ends a hold, if one lasts, and reports whether one did. p.mu must be held.
func (p *Proxy) endHold() bool {
	if p.release == nil {
		return false
	}
	p.held.Store(false)
	close(p.release)
	p.release = nil
	return true
}

// holding returns the channel closed at the end of the current hold, or nil when there is none.
func (p *Proxy) holding() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.release
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if p.holding() != nil {
		// Accepted during a hold: swallow what the client sends and answer nothing, until the
		// client gives up or the hold ends (Restore and Cut close the connection).
		_, _ = io.Copy(io.Discard, client)
		return
	}
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(upstream) {
		upstream.Close()
		return
	}
	defer p.untrack(upstream)
	done := make(chan bool, 2)
	go func() { done <- p.pipe(upstream, client, true) }()
	go func() { done <- p.pipe(client, upstream, false) }()
	// Either side closing ends both: the deferred untracks close the other. After a CutAfter,
	// the target's side is closed only once it has answered or ended the stream: closed earlier,
	// with its answer unread, it would be reset, and the target could lose the chunk.
	if cut := <-done; cut {
		<-done
	}
	if release := p.holding(); release != nil {
		<-release // a black hole does not pass a close on either
	}
}

// pipe copies src to dst until either fails, dropping what it reads while the link is held and
// keeping it back while the link is paused. fromClient marks the client's direction, the one
// CutAfter watches; it reports whether it ended with CutAfter's cut.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) (cut bool) {
	buf := make([]byte, 32<<10)
	var (
		rule *cutRule // the CutAfter sent is gathered for
		sent []byte   // what the client sent since rule was armed
	)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if resume := p.pausing(); resume != nil {
				<-resume
			}
		}
		if n > 0 && fromClient {
			if hook := p.sendHook(); hook != nil {
				hook(buf[:n])
			}
			if r := p.armedCut(); r != nil {
				if r != rule {
					rule, sent = r, nil
				}
				sent = append(sent, buf[:n]...)
				if r.match(sent) && p.takeCut(r) {
					// The client goes first, so that no answer can reach it; the target gets the
					// chunk and then the end of the stream, as from a client that died.
					src.Close()
					_, _ = dst.Write(buf[:n])
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					return true
				}
			}
		}
		if n > 0 && !p.held.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
