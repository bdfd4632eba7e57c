package httpbody

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// A body that keeps moving is read to its end however long it takes in all; one that stops for
// longer than the pause fails with a timeout, which the server turns into a closed connection.
func TestIdleDeadline(t *testing.T) {
	// The pause leaves a loaded machine's scheduler room: a gap of the moving body below is a
	// quarter of it.
	const pause = time.Second
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, IdleFor(w, r.Body, pause))
		if err == nil && n != 10 {
			err = errors.New("short body")
		}
		got <- err
	}))
	defer srv.Close()

	send := func(gaps ...time.Duration) error {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
		for _, g := range gaps {
			time.Sleep(g)
			if _, err := io.WriteString(conn, "x"); err != nil {
				break
			}
		}
		select {
		case err := <-got:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the handler never finished reading")
			return nil
		}
	}

	// Ten bytes, one every 250 ms: 2.5 s in all, over twice the pause, never idle for it.
	moving := make([]time.Duration, 10)
	for i := range moving {
		moving[i] = pause / 4
	}
	if err := send(moving...); err != nil {
		t.Fatalf("a slow but moving body: %v", err)
	}

	// Three bytes, then nothing for twice the pause.
	start := time.Now()
	err := send(0, 0, 0, 2*pause)
	if !errors.Is(err, os.ErrDeadlineExceeded) && (err == nil || !strings.Contains(err.Error(), "timeout")) {
		t.Fatalf("a stalled body: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 2*pause+time.Second {
		t.Fatalf("the stalled body was cut after %v, the pause is %v", took, pause)
	}
}
