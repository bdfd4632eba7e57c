package redact

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tt := range []struct{ in, want, secret string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", ""},
		{"nats://s3cr3ttoken@127.0.0.1:1", "nats://xxxxx@127.0.0.1:1", "s3cr3ttoken"},
		{"nats://ann:hunter2@a:4222, tls://tok3n@b:4222", "nats://ann:xxxxx@a:4222,tls://xxxxx@b:4222", "hunter2"},
		{"postgres://postgres@127.0.0.1:1/x?sslmode=disable&password=hunter3",
			"postgres://postgres@127.0.0.1:1/x?password=xxxxx&sslmode=disable", "hunter3"},
		{"postgresql://mv:pw0rd@db/mailvet?sslpassword=keypass", "postgresql://mv:xxxxx@db/mailvet?sslpassword=xxxxx", "keypass"},
		{"postgres://mailvet@db/mailvet", "postgres://mailvet@db/mailvet", ""},
		{"host=db user=mv password=pw0rd dbname=mailvet", "host=db user=mv password=xxxxx dbname=mailvet", "pw0rd"},
		{"host=db password = 'pa ss\\'wd' dbname=x", "host=db password=xxxxx dbname=x", "wd"},
		{"not a url", "(unparsable URL)", ""},
		{"nats://a b@%zz", "(unparsable URL)", ""},
	} {
		got := URL(tt.in)
		if got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.secret != "" && strings.Contains(got, tt.secret) {
			t.Errorf("URL(%q) leaks %q", tt.in, tt.secret)
		}
	}
}

func TestPeer(t *testing.T) {
	if Peer(nil) != nil {
		t.Error("Peer(nil) is not nil")
	}
	plain := errors.New("no connection here")
	if Peer(plain) != plain {
		t.Error("an error without a network operation changed")
	}
	op := &net.OpError{Op: "write", Net: "tcp",
		Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080},
		Addr:   &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}, Err: syscall.EPIPE}
	err := Peer(fmt.Errorf("export: %w", op))
	if got, want := err.Error(), "export: write tcp 10.0.0.5:8080->(the client): broken pipe"; got != want {
		t.Errorf("Peer = %q, want %q", got, want)
	}
	if strings.Contains(err.Error(), "203.0.113.7") {
		t.Errorf("Peer = %q names the client", err)
	}
	if !errors.Is(err, syscall.EPIPE) {
		t.Error("errors.Is no longer sees the cause")
	}
}

func TestAddress(t *testing.T) {
	cause := errors.New("550 5.1.1 <Ann@Example.com>: Recipient address rejected")
	err := Address(fmt.Errorf("RCPT TO: %w", cause), "ann@example.com", "<recipient>")
	if got, want := err.Error(), "RCPT TO: 550 5.1.1 <<recipient>>: Recipient address rejected"; got != want {
		t.Errorf("Address = %q, want %q", got, want)
	}
	if !errors.Is(err, cause) {
		t.Error("errors.Is no longer sees the cause")
	}
	if other := errors.New("421 try later"); Address(other, "ann@example.com", "x") != other {
		t.Error("an error without the address changed")
	}
}
