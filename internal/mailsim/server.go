package mailsim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
)

// ServerOptions script one SMTP server (one loopback address).
type ServerOptions struct {
	// Name is the host name MX records use for this server; its A record is the server's address.
	Name string

	Refuse       bool          // nothing listens: connections are refused
	Tarpit       bool          // accept connections but never send the banner
	BannerWait   time.Duration // send the banner this late (a slow greeting)
	RequireTLS   bool          // offer STARTTLS and answer MAIL with 530 5.7.0 until it is used
	NoPipelining bool          // do not advertise PIPELINING (clients must wait for every reply)
	// NoSMTPUTF8 leaves SMTPUTF8 (RFC 6531) out of EHLO, as older servers do: MAIL FROM's SMTPUTF8
	// parameter is then refused (504 5.5.4) and so is a UTF-8 mailbox (553 5.6.7). A domain
	// gets a server without it by naming one as its MX.
	NoSMTPUTF8 bool

	RTT        time.Duration // added round-trip latency; 0 means the World's
	ReplyDelay time.Duration // processing time before every MAIL, RCPT and RSET reply

	MaxRecipientsPerSession int // 452 4.5.3 for every RCPT past this many in one connection; 0 means no limit
	MaxRecipientsPerMessage int // go-smtp's per-transaction limit, advertised as LIMITS RCPTMAX; 0 means none

	// ThrottleAfter is the number of rejected commands (MAIL or RCPT) in one connection after which every
	// further reply is delayed by ThrottleDelay, as Postfix's smtpd_soft_error_limit (10) and
	// smtpd_error_sleep_time (1s) do. 0 means 10; a negative value disables the throttle.
	ThrottleAfter int
	ThrottleDelay time.Duration // 0 means 1s

	// MailReply, when set, answers every MAIL FROM (e.g. a 554 5.7.1 for a blocked sender).
	MailReply *Reply
	// RcptSenderReply, when set, answers every RCPT: the sender is refused at RCPT time, as
	// Postfix does with smtpd_delay_reject (e.g. 550 5.7.1 "Sender address rejected").
	RcptSenderReply *Reply

	// HardErrorLimit is the number of rejected commands (MAIL or RCPT) in one connection after
	// which the next command is answered 421 4.7.0 and the connection closed, as Postfix's
	// smtpd_hard_error_limit (20) does. 0 means no limit.
	HardErrorLimit int
	// MaxRecipientsPerTransaction answers 452 4.5.3 "Too many recipients" to every RCPT past this
	// many in one MAIL transaction, without advertising it (unlike MaxRecipientsPerMessage), as
	// Postfix's smtpd_recipient_limit does. 0 means no limit.
	MaxRecipientsPerTransaction int
	// MaxConnsPerClient turns away every connection over this many open at once from one client
	// address with a 421 4.7.0 "Too many connections" banner (Postfix's
	// smtpd_client_connection_count_limit). 0 means no limit.
	MaxConnsPerClient int
	// Banner, when set, is the greeting instead of 220; the connection is closed after it
	// (e.g. 421 4.3.2 "Service not available", or 554 5.7.1 for a blocked client).
	Banner *Reply
	// DropFirst closes the first this many connections at once, before any banner (a server
	// restarting, a full accept queue): a transient failure.
	DropFirst int
}

// Stats count what a server (or, summed, the World) saw.
type Stats struct {
	Sessions       int64 // connections accepted
	PeakConcurrent int64 // most connections open at once (the largest of any server for a World)
	Open           int64 // connections open now (summed over the servers for a World)
	Commands       int64 // EHLO/HELO, MAIL, RCPT and RSET commands handled
	RoundTrips     int64 // times a client sent after waiting for a reply, including the banner wait
	Rcpts          int64 // RCPT commands that reached the recipient check
	Rejected       int64 // RCPT commands answered 4xx or 5xx
	MaxRejected    int64 // most rejected recipients in one connection
	Throttled      int64 // replies delayed by the error throttle
	TLS            int64 // STARTTLS handshakes completed
	Errors         int64 // commands answered 4xx or 5xx (MAIL and RCPT), banners refused not included
	Disconnects    int64 // connections the server ended: a refusing banner, too many connections, the hard error limit
	TooMany        int64 // connections turned away by MaxConnsPerClient (also counted in Sessions and Disconnects)
}

type counters struct {
	sessions, concurrent, peak, commands, roundTrips, rcpts, rejected, maxRejected, throttled, tls atomic.Int64
	errors, disconnects, tooMany                                                                   atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Sessions: c.sessions.Load(), PeakConcurrent: c.peak.Load(), Open: c.concurrent.Load(), Commands: c.commands.Load(),
		RoundTrips: c.roundTrips.Load(), Rcpts: c.rcpts.Load(), Rejected: c.rejected.Load(),
		MaxRejected: c.maxRejected.Load(), Throttled: c.throttled.Load(), TLS: c.tls.Load(),
		Errors: c.errors.Load(), Disconnects: c.disconnects.Load(), TooMany: c.tooMany.Load(),
	}
}

func (c *counters) reset() {
	for _, v := range []*atomic.Int64{&c.sessions, &c.peak, &c.commands, &c.roundTrips, &c.rcpts, &c.rejected, &c.maxRejected, &c.throttled, &c.tls, &c.errors, &c.disconnects, &c.tooMany} {
		v.Store(0)
	}
	c.peak.Store(c.concurrent.Load())
}

func storeMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// Server is one scripted SMTP server on its own loopback address.
type Server struct {
	w     *World
	opts  ServerOptions
	addr  netip.Addr
	rtt   time.Duration
	ln    net.Listener
	smtp  *smtp.Server
	stats counters

	mu      sync.Mutex
	conns   map[net.Conn]struct{} // tarpit connections, closed by close
	clients map[netip.Addr]int    // open connections per client address (MaxConnsPerClient)
	dropped atomic.Int64          // connections seen, for DropFirst
}

// AddServer starts a server on the next free loopback address and registers its name for A
// look-ups.
func (w *World) AddServer(opts ServerOptions) (*Server, error) {
	w.mu.Lock()
	ip, err := w.allocIP()
	port := w.port
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s := &Server{w: w, opts: opts, addr: ip, rtt: opts.RTT, conns: map[net.Conn]struct{}{}, clients: map[netip.Addr]int{}}
	if s.rtt == 0 {
		s.rtt = w.opts.RTT
	}
	if s.opts.ThrottleAfter == 0 {
		s.opts.ThrottleAfter = 10
	}
	if s.opts.ThrottleDelay == 0 {
		s.opts.ThrottleDelay = time.Second
	}
	if !opts.Refuse {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		if err != nil {
			return nil, fmt.Errorf("mailsim: listen on %s: %w", ip, err)
		}
		s.ln = &listener{Listener: ln, s: s}
		if opts.Tarpit {
			go s.tarpit()
		} else {
			s.smtp = smtp.NewServer(backend{s})
			s.smtp.Domain = opts.Name
			s.smtp.ReadTimeout = 30 * time.Second
			s.smtp.MaxRecipients = opts.MaxRecipientsPerMessage
			s.smtp.EnableSMTPUTF8 = !opts.NoSMTPUTF8
			s.smtp.ErrorLog = log.New(io.Discard, "", 0)
			if opts.RequireTLS {
				s.smtp.TLSConfig = &tls.Config{Certificates: []tls.Certificate{w.cert}}
			}
			go s.smtp.Serve(s.ln)
		}
	}
	w.mu.Lock()
	w.servers = append(w.servers, s)
	if opts.Name != "" {
		w.hosts[strings.ToLower(strings.TrimSuffix(opts.Name, "."))] = ip
	}
	w.mu.Unlock()
	return s, nil
}

// Addr is the server's loopback address.
func (s *Server) Addr() netip.Addr { return s.addr }

// Name is the server's host name.
func (s *Server) Name() string { return s.opts.Name }

// Stats returns the server's counters.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ResetStats zeroes the server's counters (the peak restarts from the connections now open).
func (s *Server) ResetStats() { s.stats.reset() }

// Stats sums the counters of every server; PeakConcurrent and MaxRejected are the largest of any
// one server, since politeness limits are per address.
func (w *World) Stats() Stats {
	w.mu.Lock()
	servers := append([]*Server(nil), w.servers...)
	w.mu.Unlock()
	var t Stats
	for _, s := range servers {
		st := s.Stats()
		t.Sessions += st.Sessions
		t.Commands += st.Commands
		t.RoundTrips += st.RoundTrips
		t.Rcpts += st.Rcpts
		t.Rejected += st.Rejected
		t.Throttled += st.Throttled
		t.TLS += st.TLS
		t.Errors += st.Errors
		t.Disconnects += st.Disconnects
		t.TooMany += st.TooMany
		t.Open += st.Open
		t.PeakConcurrent = max(t.PeakConcurrent, st.PeakConcurrent)
		t.MaxRejected = max(t.MaxRejected, st.MaxRejected)
	}
	return t
}

// ResetStats zeroes every server's counters, RcptsTo and the DNS counters.
func (w *World) ResetStats() {
	w.mu.Lock()
	servers := append([]*Server(nil), w.servers...)
	w.mu.Unlock()
	for _, s := range servers {
		s.ResetStats()
	}
	w.mu.Lock()
	w.rcptsTo = nil
	w.mu.Unlock()
	w.dns.resetStats()
}

func (s *Server) opened() {
	s.stats.sessions.Add(1)
	s.stats.roundTrips.Add(1) // connect and wait for the banner
	storeMax(&s.stats.peak, s.stats.concurrent.Add(1))
}

func (s *Server) closed() { s.stats.concurrent.Add(-1) }

func (s *Server) close() {
	if s.ln == nil {
		return
	}
	if s.smtp != nil {
		s.smtp.Close()
	} else {
		s.ln.Close()
	}
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns { // closing takes s.mu (clientLeft)
		c.Close()
	}
}

// tarpit accepts connections and holds them silently until the client gives up.
func (s *Server) tarpit() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go func() {
			io.Copy(io.Discard, c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// listener wraps accepted connections in simConn.
type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.s.opened()
		client := clientAddr(c)
		sc := newSimConn(c, l.s, l.s.rtt, time.Now().Add(l.s.opts.BannerWait))
		sc.client = client
		l.s.mu.Lock()
		l.s.clients[client]++
		over := l.s.opts.MaxConnsPerClient > 0 && l.s.clients[client] > l.s.opts.MaxConnsPerClient
		l.s.mu.Unlock()
		switch {
		case l.s.dropped.Add(1) <= int64(l.s.opts.DropFirst):
			l.s.stats.disconnects.Add(1)
			go sc.Close()
		case over:
			l.s.stats.tooMany.Add(1)
			go sc.turnAway(Reply{421, "4.7.0", "Error: too many connections from your address"})
		case l.s.opts.Banner != nil:
			go sc.turnAway(*l.s.opts.Banner)
		default:
			return sc, nil
		}
	}
}

func clientAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// clientLeft is called once per connection when it ends.
func (s *Server) clientLeft(client netip.Addr) {
	s.mu.Lock()
	if s.clients[client]--; s.clients[client] <= 0 {
		delete(s.clients, client)
	}
	s.mu.Unlock()
	s.closed()
}

type backend struct{ s *Server }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	b.s.stats.commands.Add(1) // the EHLO or HELO that creates the session
	sc := simConnOf(c.Conn())
	if _, isTLS := c.TLSConnectionState(); isTLS {
		b.s.stats.tls.Add(1)
	}
	return &session{s: b.s, c: c, sc: sc}, nil
}

func simConnOf(c net.Conn) *simConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, _ := c.(*simConn)
	return sc
}

// session is one go-smtp session. Counters that must survive STARTTLS live on the simConn.
type session struct {
	s        *Server
	c        *smtp.Conn
	sc       *simConn
	rcpts    int
	txnRcpts int  // RCPTs in the current MAIL transaction
	utf8     bool // the current MAIL transaction declared SMTPUTF8
}

// pace applies the server's processing time and the error throttle before a reply.
func (ss *session) pace() {
	ss.s.stats.commands.Add(1)
	if ss.s.opts.ReplyDelay > 0 {
		time.Sleep(ss.s.opts.ReplyDelay)
	}
	if ss.sc != nil && ss.s.opts.ThrottleAfter > 0 && ss.sc.errors.Load() >= int64(ss.s.opts.ThrottleAfter) {
		ss.s.stats.throttled.Add(1)
		time.Sleep(ss.s.opts.ThrottleDelay)
	}
}

// hardLimit reports whether the connection has used up its errors; if so the reply it returns
// ends the connection.
func (ss *session) hardLimit() error {
	if ss.sc == nil || ss.s.opts.HardErrorLimit <= 0 || ss.sc.errors.Load() < int64(ss.s.opts.HardErrorLimit) {
		return nil
	}
	ss.sc.hangUp()
	return Reply{421, "4.7.0", "Error: too many errors"}.err()
}

// failed counts a rejected command against the connection.
func (ss *session) failed(err error) error {
	if err != nil {
		ss.s.stats.errors.Add(1)
		if ss.sc != nil {
			ss.sc.errors.Add(1)
		}
	}
	return err
}

func (ss *session) Mail(from string, opts *smtp.MailOptions) error {
	ss.pace()
	if err := ss.hardLimit(); err != nil {
		return err
	}
	ss.txnRcpts = 0
	ss.utf8 = opts != nil && opts.UTF8
	if ss.s.opts.RequireTLS {
		if _, isTLS := ss.c.TLSConnectionState(); !isTLS {
			return ss.failed(&smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Must issue a STARTTLS command first"})
		}
	}
	if r := ss.s.opts.MailReply; r != nil {
		return ss.failed(r.err())
	}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.pace()
	if err := ss.hardLimit(); err != nil {
		return err
	}
	ss.s.stats.rcpts.Add(1)
	ss.s.w.countRcpt(to)
	ss.rcpts++
	ss.txnRcpts++
	var r Reply
	if max := ss.s.opts.MaxRecipientsPerSession; max > 0 && ss.rcpts > max {
		r = Reply{452, "4.5.3", "Too many recipients"}
	} else if max := ss.s.opts.MaxRecipientsPerTransaction; max > 0 && ss.txnRcpts > max {
		r = Reply{452, "4.5.3", "Error: too many recipients"}
	} else if sr := ss.s.opts.RcptSenderReply; sr != nil {
		r = *sr
	} else if !ss.utf8 && !isASCII(to) {
		// A UTF-8 mailbox outside a transaction that declared SMTPUTF8, in Postfix's words.
		r = ReplyNeedSMTPUTF8
	} else {
		var delay time.Duration
		r, delay = ss.s.w.rcptReply(to)
		if delay > 0 {
			time.Sleep(delay)
		}
	}
	if r.Code >= 400 {
		ss.s.stats.rejected.Add(1)
		if ss.sc != nil {
			storeMax(&ss.s.stats.maxRejected, ss.sc.rejected.Add(1))
		}
	}
	return ss.failed(r.err())
}

func (ss *session) Reset() {
	ss.pace()
	ss.txnRcpts, ss.utf8 = 0, false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func (ss *session) Data(r io.Reader) error {
	io.Copy(io.Discard, r)
	return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "mailsim accepts no mail"}
}

func (ss *session) Logout() error { return nil }

// err turns a reply into what go-smtp writes: nil for 2xx, an *smtp.SMTPError otherwise.
func (r Reply) err() error {
	if r.Code < 300 {
		return nil
	}
	e := &smtp.SMTPError{Code: r.Code, EnhancedCode: smtp.NoEnhancedCode, Message: r.Text}
	if parts := strings.Split(r.Enhanced, "."); len(parts) == 3 {
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				return errors.New(r.String())
			}
			e.EnhancedCode[i] = n
		}
	}
	return e
}
