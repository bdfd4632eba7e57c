// Package mailer sends the dashboard's mail — the email confirmation and password reset links —
// through the SMTP relay the operator configures (docs/operations.md, "Mail"). It is a client
// only: Mailvet never runs a mail server of its own in production. A message is one plain-text
// part; its recipient is an address the dashboard has already checked (docs/dashboard.md).
package mailer

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/smtp"
	"os"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/redact"
)

// Config is the relay (MAILVET_MAIL_* in docs/operations.md, "Configuration").
type Config struct {
	Addr     string // host:port of the relay
	From     string // the sender address, in the From header and the envelope
	Username string // AUTH PLAIN user; empty: no AUTH
	Password string
	// RootCAs verify the relay's certificate after STARTTLS; nil means the system's CAs.
	RootCAs *x509.CertPool
	// HELO is the name given in EHLO; empty means the host name.
	HELO string
	// AllowPlaintext lets a relay that is not on loopback and offers no STARTTLS have the message
	// in clear (MAILVET_MAIL_ALLOW_PLAINTEXT). The message is a sign-in credential — a confirmation
	// or password-reset link — so without it such a relay gets nothing.
	AllowPlaintext bool
}

// Message is one mail: a plain-text body of lines.
type Message struct {
	To      string
	Subject string
	Body    string
}

// sendTimeout bounds one whole SMTP conversation, so that a relay that accepts the connection and
// never answers cannot hold the sender forever.
const sendTimeout = 30 * time.Second

// Relay sends mail through one SMTP relay.
type Relay struct {
	cfg Config
	// onLoopback decides whether a relay host is on this machine (loopback); tests that can only
	// run relays on loopback replace it to see how a remote relay is treated.
	onLoopback func(host string) bool
}

// New returns a Relay for cfg.
func New(cfg Config) *Relay {
	if cfg.HELO == "" {
		cfg.HELO, _ = os.Hostname()
		if cfg.HELO == "" {
			cfg.HELO = "localhost"
		}
	}
	return &Relay{cfg: cfg, onLoopback: loopback}
}

// ErrCredentialsInClear is Send's refusal to authenticate on a connection that is neither TLS nor
// to a loopback relay: the password would cross the network in clear.
var ErrCredentialsInClear = errors.New("mailer: the relay offers no STARTTLS and is not on loopback; refusing to send the password in clear")

// ErrPlaintextRelay is Send's refusal to hand a message to a relay that is not on loopback and
// offers no STARTTLS: the link in it signs its holder in, and would cross the network in clear.
var ErrPlaintextRelay = errors.New("mailer: the relay offers no STARTTLS and is not on loopback; refusing to send a sign-in link in clear (MAILVET_MAIL_ALLOW_PLAINTEXT=true allows it)")

// Send delivers m to the relay. STARTTLS is used whenever the relay offers it, and a failed TLS
// handshake (an untrusted certificate) fails the send rather than falling back to clear text.
// Without TLS, only a relay on loopback gets the message (or any relay, with AllowPlaintext), and
// AUTH, when a username is configured, is sent only over TLS or to a relay on loopback.
//
// The error names no recipient: a relay's refusal often quotes the address ("550 5.1.1
// <ann@example.com>: Recipient address rejected"), and the caller logs the error, where no email
// address goes (docs/personal-data.md, "Where it is stored").
func (r *Relay) Send(ctx context.Context, m Message) (err error) {
	defer func() { err = redact.Address(err, m.To, "<recipient>") }()
	if bad(m.To) || bad(m.Subject) || bad(r.cfg.From) {
		return errors.New("mailer: a line break or control character in an address or the subject")
	}
	host, _, err := net.SplitHostPort(r.cfg.Addr)
	if err != nil {
		return fmt.Errorf("mailer: relay address %q: %w", r.cfg.Addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.cfg.Addr)
	if err != nil {
		return fmt.Errorf("mailer: connect to the relay: %w", err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("mailer: relay greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello(r.cfg.HELO); err != nil {
		return fmt.Errorf("mailer: EHLO: %w", err)
	}
	secure := false
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host, RootCAs: r.cfg.RootCAs, MinVersion: tls.VersionTLS12}); err != nil {
			return fmt.Errorf("mailer: STARTTLS: %w", err)
		}
		secure = true
	}
	local := r.onLoopback(host)
	if !secure && !local && !r.cfg.AllowPlaintext {
		return ErrPlaintextRelay
	}
	if r.cfg.Username != "" {
		if !secure && !local {
			return ErrCredentialsInClear
		}
		if err := c.Auth(plainAuth{user: r.cfg.Username, password: r.cfg.Password, host: host}); err != nil {
			return fmt.Errorf("mailer: AUTH: %w", err)
		}
	}
	if err := c.Mail(r.cfg.From); err != nil {
		return fmt.Errorf("mailer: MAIL FROM: %w", err)
	}
	if err := c.Rcpt(m.To); err != nil {
		return fmt.Errorf("mailer: RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("mailer: DATA: %w", err)
	}
	if _, err := w.Write(r.compose(m)); err != nil {
		return fmt.Errorf("mailer: write the message: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("mailer: the relay refused the message: %w", err)
	}
	return c.Quit()
}

// compose writes m as an RFC 5322 message with CRLF line ends. The body is UTF-8 text sent as
// 8bit: the dashboard's bodies are short lines, and the links in them stay whole and readable.
func (r *Relay) compose(m Message) []byte {
	var b strings.Builder
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	domain := r.cfg.From[strings.LastIndex(r.cfg.From, "@")+1:]
	for _, h := range [][2]string{
		{"From", "Mailvet <" + r.cfg.From + ">"},
		{"To", "<" + m.To + ">"},
		{"Subject", m.Subject},
		{"Date", time.Now().UTC().Format(time.RFC1123Z)},
		{"Message-ID", "<" + hex.EncodeToString(id) + "@" + domain + ">"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "text/plain; charset=utf-8"},
		{"Content-Transfer-Encoding", "8bit"},
		{"Auto-Submitted", "auto-generated"},
	} {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	for _, line := range strings.Split(strings.ReplaceAll(m.Body, "\r\n", "\n"), "\n") {
		b.WriteString(line + "\r\n")
	}
	return []byte(b.String())
}

// bad reports a control character (a CR or LF above all, which would start a new header).
func bad(s string) bool {
	return strings.IndexFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0
}

// loopback reports whether host is a loopback relay, where a password never leaves the machine.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// plainAuth is AUTH PLAIN (RFC 4616). net/smtp's PlainAuth allows only "localhost" and the two
// literal loopback addresses in clear; Send has already applied the same rule to every loopback
// address (loopback), so this one sends on any connection Send lets through.
type plainAuth struct{ user, password, host string }

func (a plainAuth) Start(server *smtp.ServerInfo) (string, []byte, error) {
	if server.Name != a.host {
		return "", nil, errors.New("mailer: wrong host name")
	}
	return "PLAIN", []byte("\x00" + a.user + "\x00" + a.password), nil
}

func (a plainAuth) Next(_ []byte, more bool) ([]byte, error) {
	if more {
		return nil, errors.New("mailer: unexpected server challenge")
	}
	return nil, nil
}
