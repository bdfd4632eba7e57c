package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	return serve(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// serve listens on loopback until the test ends and runs handle on each connection, closing it
// after; it returns the address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a line and waits up to wait for the echo: nil when it came back.
func roundTrip(c net.Conn, wait time.Duration) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo garbled: " + line)
	}
	return nil
}

// wantSilent fails unless c stays open and hears nothing: a read times out, not EOF.
func wantSilent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	err := roundTrip(c, 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: want silence on an open connection, got %v", what, err)
	}
}

func TestHoldBlackHolesAndRestoreRecovers(t *testing.T) {
	t.Parallel()
	p := start(t)
	old := dial(t, p)
	if err := roundTrip(old, 2*time.Second); err != nil {
		t.Fatalf("before hold: %v", err)
	}

	p.Hold()
	wantSilent(t, old, "open connection during hold")
	fresh := dial(t, p) // accepted, but nothing is forwarded
	wantSilent(t, fresh, "new connection during hold")

	p.Restore()
	// The connections of the hold are closed: their streams lost bytes.
	for _, c := range []net.Conn{old, fresh} {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
			t.Fatalf("a connection of the hold stayed open after Restore (read: %v)", err)
		}
	}
	if err := roundTrip(dial(t, p), 2*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

// A pause loses nothing: the line sent during it is echoed after Resume, on the same connection.
func TestPauseStallsAndResumeDelivers(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p)
	if err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatalf("before pause: %v", err)
	}
	p.Pause()
	wantSilent(t, c, "open connection during pause")
	p.Resume()
	// The echo of the line sent during the pause comes now, then the connection works as before.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || line != "ping\n" {
		t.Fatalf("the line sent during the pause: %q, %v", line, err)
	}
	if err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}

func TestCutDropsAndRestoreRecovers(t *testing.T) {
	t.Parallel()
	p := start(t)
	c := dial(t, p)
	if err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := roundTrip(c, 2*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Cut the connection should be closed, got %v", err)
	}
	p.Restore()
	if err := roundTrip(dial(t, p), 2*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

// Close must not wait for a hold to end.
func TestCloseEndsAHold(t *testing.T) {
	t.Parallel()
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	if err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Hold()
	_ = dial(t, p)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hung on a held proxy")
	}
}

// CutAfter passes the matching chunk on and then cuts its connection, once: the target receives
// the request and the end of the stream, its answer never reaches the client, and other
// connections, and later ones, are left alone.
func TestCutAfterDeliversTheRequestAndLosesTheAnswer(t *testing.T) {
	got := make(chan string, 4)
	target := serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				got <- "EOF"
				return
			}
			got <- line
			_, _ = c.Write([]byte(line))
		}
	})
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	other := dial(t, p)
	if err := roundTrip(other, time.Second); err != nil {
		t.Fatalf("other connection before: %v", err)
	}
	<-got
	p.CutAfter(func(sent []byte) bool { return strings.Contains(string(sent), "commit\n") })
	c := dial(t, p)
	if err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("a chunk that does not match: %v", err)
	}
	<-got
	if _, err := c.Write([]byte("commit\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 64)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client read %d bytes, %v: want its connection cut", n, err)
	}
	for _, want := range []string{"commit\n", "EOF"} {
		select {
		case line := <-got:
			if line != want {
				t.Fatalf("the target got %q, want %q", line, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("the target did not get %q", want)
		}
	}
	if err := roundTrip(other, time.Second); err != nil {
		t.Fatalf("other connection after: %v", err)
	}
	if err := roundTrip(dial(t, p), time.Second); err != nil {
		t.Fatalf("a new connection after the cut: %v", err)
	}
}

// BeforeSend runs its hook with what the client sent before the target gets it: what the hook
// does (here, telling the target something on a side channel) reaches the target first.
func TestBeforeSendActsBeforeTheTargetSeesTheChunk(t *testing.T) {
	events := make(chan string, 4)
	target := serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			events <- "target got " + line
			_, _ = c.Write([]byte(line))
		}
	})
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.BeforeSend(func(chunk []byte) {
		if strings.Contains(string(chunk), "ping\n") {
			events <- "hook saw ping"
		}
	})
	c := dial(t, p)
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hook saw ping", "target got ping\n"} {
		select {
		case e := <-events:
			if e != want {
				t.Fatalf("got %q, want %q", e, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no %q", want)
		}
	}
	p.BeforeSend(nil)
	if err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("after the hook is removed: %v", err)
	}
}
