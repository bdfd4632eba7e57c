// Package mailsink is a small SMTP server on loopback that keeps the mail it receives and never
// delivers it: the relay of dev mode when the operator configured none (docs/development.md,
// "Mail in dev mode"), where it logs each message's links so that `make demo` shows the
// confirmation link, and the relay of the tests, which read the links from it.
package mailsink

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/mail"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one mail the sink received.
type Message struct {
	From    string
	To      []string
	Subject string
	Body    string
	// TLS says the message came after STARTTLS; User is the AUTH user ("" without AUTH).
	TLS  bool
	User string
}

// Links are the http and https URLs in the body, in order.
func (m Message) Links() []string { return Links(m.Body) }

var linkRE = regexp.MustCompile(`https?://[^\s<>"]+`)

// Links returns the http and https URLs in s.
func Links(s string) []string { return linkRE.FindAllString(s, -1) }

// Options change what the sink offers.
type Options struct {
	// TLS, when set, makes the sink offer STARTTLS with this certificate.
	TLS *tls.Certificate
	// Auth, when set, makes the sink offer AUTH PLAIN (also without TLS) and accept the user
	// and password it approves.
	Auth func(user, password string) bool
	// Log, when set, gets one line per message with its recipients, subject and links
	// (dev mode: docs/development.md). Nil logs nothing.
	Log *slog.Logger
}

// Bounds: the sink runs in dev mode and tests, but it is still a server, so what it keeps is bounded.
const (
	maxMessageBytes = 256 << 10
	maxKept         = 1000
)

// Sink is a running mail sink.
type Sink struct {
	ln   net.Listener
	srv  *smtp.Server
	opts Options

	mu    sync.Mutex
	msgs  []Message
	taken []bool
	added chan struct{} // closed and replaced when a message arrives
}

// Start listens on addr (a loopback host:port; port 0 picks one) and serves until Close.
func Start(addr string, opts Options) (*Sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Sink{ln: ln, opts: opts, added: make(chan struct{})}
	s.srv = smtp.NewServer(backend{s})
	s.srv.Domain = "mailsink.localhost"
	s.srv.ReadTimeout = 30 * time.Second
	s.srv.WriteTimeout = 30 * time.Second
	s.srv.MaxMessageBytes = maxMessageBytes
	s.srv.MaxRecipients = 10
	s.srv.AllowInsecureAuth = true
	s.srv.ErrorLog = log.New(io.Discard, "", 0)
	if opts.TLS != nil {
		s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*opts.TLS}}
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the sink's host:port.
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Close stops the sink.
func (s *Sink) Close() error { return s.srv.Close() }

// Messages returns every message kept, oldest first.
func (s *Sink) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Next returns the oldest message to the address to (case-insensitive) that Next has not returned
// yet, waiting for one until ctx ends.
func (s *Sink) Next(ctx context.Context, to string) (Message, error) {
	for {
		s.mu.Lock()
		for i, m := range s.msgs {
			if s.taken[i] {
				continue
			}
			for _, r := range m.To {
				if strings.EqualFold(r, to) {
					s.taken[i] = true
					s.mu.Unlock()
					return m, nil
				}
			}
		}
		added := s.added
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return Message{}, errors.New("mailsink: no message to " + to + ": " + ctx.Err().Error())
		case <-added:
		}
	}
}

func (s *Sink) keep(m Message) {
	s.mu.Lock()
	if len(s.msgs) >= maxKept {
		s.msgs, s.taken = s.msgs[1:], s.taken[1:]
	}
	s.msgs = append(s.msgs, m)
	s.taken = append(s.taken, false)
	close(s.added)
	s.added = make(chan struct{})
	s.mu.Unlock()
	if s.opts.Log != nil {
		// Dev mode only: the link is the way a developer confirms an account on a machine that
		// sends no mail (docs/development.md, "Mail in dev mode").
		s.opts.Log.Info("mail sink: message received (not delivered)", "to", strings.Join(m.To, ", "),
			"subject", m.Subject, "links", strings.Join(m.Links(), " "))
	}
}

type backend struct{ s *Sink }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{s: b.s, conn: c}, nil
}

type session struct {
	s    *Sink
	conn *smtp.Conn
	from string
	to   []string
	user string
}

func (ss *session) AuthMechanisms() []string {
	if ss.s.opts.Auth == nil {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || ss.s.opts.Auth == nil {
		return nil, smtp.ErrAuthUnsupported
	}
	return sasl.NewPlainServer(func(_, user, password string) error {
		if !ss.s.opts.Auth(user, password) {
			return errors.New("invalid credentials")
		}
		ss.user = user
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.opts.Auth != nil && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(msg.Body)
	if err != nil {
		return err
	}
	_, secure := ss.conn.TLSConnectionState()
	ss.s.keep(Message{From: ss.from, To: append([]string(nil), ss.to...), Subject: msg.Header.Get("Subject"),
		Body: strings.ReplaceAll(string(body), "\r\n", "\n"), TLS: secure, User: ss.user})
	return nil
}

func (ss *session) Reset() { ss.from, ss.to = "", nil }

func (ss *session) Logout() error { return nil }
