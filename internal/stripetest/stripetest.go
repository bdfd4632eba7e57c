// Package stripetest runs stripe-mock (Stripe's official API mock) for a test: the pinned binary
// that `make tools` installs into .tools/bin, started on a free loopback port and killed when the
// test ends.
package stripetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/logtest"
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// URL starts a stripe-mock for t and returns its base URL (http://127.0.0.1:PORT).
func URL(t testing.TB) string {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("stripetest: stripe-mock not found in .tools/bin or on PATH; run `make tools` (%v)", err)
	}
	var out logtest.Buffer
	for attempt := 0; attempt < 3; attempt++ { // another process may grab the free port first
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "-http-addr", addr)
		cmd.Stdout, cmd.Stderr = &out, &out
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
		if waitUp(addr, exited, 20*time.Second) {
			t.Cleanup(stop)
			return "http://" + addr
		}
		stop()
	}
	t.Fatalf("stripetest: stripe-mock did not start:\n%s", out.String())
	return ""
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
