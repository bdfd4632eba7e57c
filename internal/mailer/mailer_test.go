package mailer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsink"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

func startSink(t *testing.T, opts mailsink.Options) *mailsink.Sink {
	t.Helper()
	s, err := mailsink.Start("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func next(t *testing.T, s *mailsink.Sink, to string) mailsink.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	m, err := s.Next(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A relay without STARTTLS gets the message in clear, with its subject, body lines and link whole.
func TestSendPlain(t *testing.T) {
	s := startSink(t, mailsink.Options{})
	r := New(Config{Addr: s.Addr(), From: "noreply@mailvet.example"})
	link := "http://localhost:8080/dashboard/confirm?token=" + strings.Repeat("A", 43)
	if err := r.Send(t.Context(), Message{To: "ann@example.com", Subject: "Confirm your email", Body: "Hello\n\n" + link + "\n"}); err != nil {
		t.Fatal(err)
	}
	m := next(t, s, "ann@example.com")
	if m.From != "noreply@mailvet.example" || m.Subject != "Confirm your email" || m.TLS || m.User != "" {
		t.Fatalf("got %+v", m)
	}
	if l := m.Links(); len(l) != 1 || l[0] != link {
		t.Fatalf("links %q, want %q", l, link)
	}
}

// STARTTLS is used when offered, the certificate is checked, and AUTH goes over it; an untrusted
// certificate fails the send instead of falling back to clear text.
func TestSendStartTLSAndAuth(t *testing.T) {
	ca := tlstest.New(t, "localhost")
	s := startSink(t, mailsink.Options{TLS: &ca.Leaf, Auth: func(u, p string) bool { return u == "relay-user" && p == "relay-secret" }})
	addr := "localhost:" + s.Addr()[strings.LastIndex(s.Addr(), ":")+1:]
	r := New(Config{Addr: addr, From: "noreply@mailvet.example", Username: "relay-user", Password: "relay-secret", RootCAs: ca.Pool})
	if err := r.Send(t.Context(), Message{To: "bob@example.com", Subject: "Reset", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	if m := next(t, s, "bob@example.com"); !m.TLS || m.User != "relay-user" {
		t.Fatalf("got TLS %v user %q, want TLS and relay-user", m.TLS, m.User)
	}
	wrong := New(Config{Addr: addr, From: "noreply@mailvet.example", Username: "relay-user", Password: "wrong", RootCAs: ca.Pool})
	if err := wrong.Send(t.Context(), Message{To: "bob@example.com", Subject: "Reset", Body: "x"}); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	untrusted := New(Config{Addr: addr, From: "noreply@mailvet.example"})
	if err := untrusted.Send(t.Context(), Message{To: "bob@example.com", Subject: "Reset", Body: "x"}); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("untrusted certificate: %v, want a STARTTLS failure", err)
	}
}

// Credentials go in clear only to a relay on loopback.
func TestCredentialsOnlyOverTLSOrLoopback(t *testing.T) {
	for host, want := range map[string]bool{"localhost": true, "127.0.0.1": true, "127.0.0.9": true, "::1": true,
		"smtp.example.com": false, "192.0.2.1": false} {
		if loopback(host) != want {
			t.Errorf("loopback(%q) = %v", host, !want)
		}
	}
	s := startSink(t, mailsink.Options{Auth: func(u, p string) bool { return true }})
	r := New(Config{Addr: s.Addr(), From: "noreply@mailvet.example", Username: "u", Password: "p"})
	if err := r.Send(t.Context(), Message{To: "c@example.com", Subject: "s", Body: "b"}); err != nil {
		t.Fatalf("AUTH to a loopback relay in clear: %v", err)
	}
}

// A relay that is not on loopback and offers no STARTTLS gets no message unless the operator
// allows it in clear; with that, it still gets no password. (The relays here are on loopback, so
// the test has the Relay treat them as remote.)
func TestRemoteRelayWithoutTLS(t *testing.T) {
	s := startSink(t, mailsink.Options{})
	remote := func(string) bool { return false }
	msg := Message{To: "d@example.com", Subject: "Reset your password", Body: "b"}

	r := New(Config{Addr: s.Addr(), From: "noreply@mailvet.example"})
	r.onLoopback = remote
	if err := r.Send(t.Context(), msg); !errors.Is(err, ErrPlaintextRelay) {
		t.Fatalf("send to a remote relay without TLS: %v, want ErrPlaintextRelay", err)
	}

	r = New(Config{Addr: s.Addr(), From: "noreply@mailvet.example", AllowPlaintext: true})
	r.onLoopback = remote
	if err := r.Send(t.Context(), msg); err != nil {
		t.Fatalf("send in clear, allowed: %v", err)
	}
	if m := next(t, s, "d@example.com"); m.TLS || m.Subject != msg.Subject {
		t.Fatalf("got %+v", m)
	}

	authed := startSink(t, mailsink.Options{Auth: func(u, p string) bool { return true }})
	r = New(Config{Addr: authed.Addr(), From: "noreply@mailvet.example", AllowPlaintext: true, Username: "u", Password: "p"})
	r.onLoopback = remote
	if err := r.Send(t.Context(), msg); !errors.Is(err, ErrCredentialsInClear) {
		t.Fatalf("AUTH to a remote relay in clear: %v, want ErrCredentialsInClear", err)
	}
}

// A line break in the recipient or subject could add headers: refused before connecting.
func TestHeaderInjectionRefused(t *testing.T) {
	r := New(Config{Addr: "127.0.0.1:1", From: "noreply@mailvet.example"})
	err := r.Send(t.Context(), Message{To: "a@example.com\r\nBcc: x@example.com", Subject: "s"})
	if err == nil || errors.Is(err, ErrCredentialsInClear) {
		t.Fatalf("got %v", err)
	}
}

// A relay that refuses the recipient names it in its reply, as Postfix does ("550 5.1.1
// <ann@example.com>: Recipient address rejected"). The error Send returns is what the dashboard
// logs (docs/personal-data.md: logs carry no email address), so it keeps the relay's code and
// words but not the address, in whatever case the relay wrote it.
func TestARefusedRecipientIsNotInTheError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		in := bufio.NewReader(c)
		fmt.Fprint(c, "220 relay.test ESMTP\r\n")
		for {
			line, err := in.ReadString('\n')
			if err != nil {
				return
			}
			switch cmd := strings.ToUpper(strings.TrimSpace(line)); {
			case strings.HasPrefix(cmd, "EHLO"):
				fmt.Fprint(c, "250 relay.test\r\n")
			case strings.HasPrefix(cmd, "MAIL"):
				fmt.Fprint(c, "250 2.1.0 Ok\r\n")
			case strings.HasPrefix(cmd, "RCPT"):
				to := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line)[len("RCPT TO:"):], "<"), ">")
				fmt.Fprintf(c, "550 5.1.1 <%s>: Recipient address rejected: User unknown (%s)\r\n", to, strings.ToUpper(to))
			case strings.HasPrefix(cmd, "QUIT"):
				fmt.Fprint(c, "221 2.0.0 Bye\r\n")
				return
			default:
				fmt.Fprint(c, "250 Ok\r\n")
			}
		}
	}()
	r := New(Config{Addr: ln.Addr().String(), From: "noreply@mailvet.example"})
	err = r.Send(t.Context(), Message{To: "Ann.Lee@Example.com", Subject: "Confirm your email", Body: "x"})
	if err == nil {
		t.Fatal("a refused recipient was sent to")
	}
	msg := err.Error()
	if strings.Contains(strings.ToLower(msg), "ann.lee@example.com") {
		t.Errorf("the error names the recipient: %s", msg)
	}
	for _, want := range []string{"RCPT TO", "550", "5.1.1", "Recipient address rejected"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lost %q: %s", want, msg)
		}
	}
}
