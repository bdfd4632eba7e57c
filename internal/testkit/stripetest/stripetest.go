// Package stripetest runs stripe-mock (Stripe's official API mock) for a test: the pinned binary
// that `make tools` installs into .tools/bin, started on loopback ports the kernel picks and
// killed when the test ends.
package stripetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/logtest"
)

// SecretKey is a test-mode key that stripe-mock accepts.
const SecretKey = "sk_test_mailvet"

// binary finds stripe-mock in .tools/bin of the module root, else on PATH.
func binary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 20 { // a module is never nested this deep
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, ".tools", "bin", "stripe-mock")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return exec.LookPath("stripe-mock")
}

// args are stripe-mock's listener flags. stripe-mock serves HTTP and HTTPS at once, and
// -http-addr alone leaves HTTPS on its default port 12112 (only -http, -http-port and -port turn
// HTTPS off, and those bind every interface), so both listeners are named: loopback, port 0. The
// kernel picks the ports while stripe-mock binds them, which leaves no window in which another
// process could take a port chosen in advance; stripe-mock prints the addresses it got.
var args = []string{"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0"}

// listeningHTTP starts the line stripe-mock prints once its HTTP listener is bound.
const listeningHTTP = "Listening for HTTP at address: "

// URL starts a stripe-mock for t and returns its base URL (http://127.0.0.1:PORT).
func URL(t testing.TB) string {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("stripetest: stripe-mock not found in .tools/bin or on PATH; run `make tools` (%v)", err)
	}
	var out logtest.Buffer
	addrs := &addrWriter{log: &out, found: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = addrs, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("stripetest: start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		cancel()
		<-exited
	}
	addr, ok := waitAddr(addrs.found, exited, 20*time.Second)
	if ok && waitUp(addr, exited, 20*time.Second) {
		t.Cleanup(stop)
		return "http://" + addr
	}
	stop()
	t.Fatalf("stripetest: stripe-mock did not start:\n%s", out.String())
	return ""
}

// waitAddr waits for the HTTP address stripe-mock prints, its exit, or the deadline.
func waitAddr(found <-chan string, exited <-chan struct{}, within time.Duration) (string, bool) {
	select {
	case addr := <-found:
		return addr, true
	case <-exited:
		return "", false
	case <-time.After(within):
		return "", false
	}
}

// addrWriter is stripe-mock's stdout: it keeps everything in log for failure messages and sends
// the HTTP listener's address on found once.
type addrWriter struct {
	log   io.Writer
	found chan string

	mu   sync.Mutex
	line bytes.Buffer
	sent bool
}

func (w *addrWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.line.Write(p)
	for {
		i := bytes.IndexByte(w.line.Bytes(), '\n')
		if i < 0 {
			break
		}
		w.scan(string(w.line.Next(i + 1)))
	}
	return w.log.Write(p)
}

func (w *addrWriter) scan(line string) {
	if addr, ok := strings.CutPrefix(strings.TrimSpace(line), listeningHTTP); ok && !w.sent {
		w.sent = true
		w.found <- addr
	}
}

// waitUp polls addr until stripe-mock answers HTTP, the process exits, or the deadline passes.
func waitUp(addr string, exited <-chan struct{}, within time.Duration) bool {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v1/customers", addr), nil)
		req.Header.Set("Authorization", "Bearer "+SecretKey)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
