// Package demoapi runs the real `api -dev -demo` binary for end-to-end tests of code that speaks
// HTTP to Mailvet (the Go client, the CLI): the whole system in one process, in the demo world of
// internal/mailsim, on a fresh database and free loopback ports (docs/development.md, "The demo world").
//
// The binary is built from ./cmd/api once per test binary, so a test exercises exactly what
// `make demo` serves, as a separate process. A test package that uses it runs its tests through
// Main, which removes the build afterwards:
//
//	func TestMain(m *testing.M) { demoapi.Main(m) }
package demoapi

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/freeport"

	"github.com/mailvet/mailvet/internal/testkit/gobuild"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Main runs the package's tests and removes the binary built for them.
func Main(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds cmd/api once.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		var err error
		if buildDir, err = os.MkdirTemp("", "mailvet-demoapi-"); err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(buildDir, "api")
		buildErr = gobuild.Build(buildDir, "./cmd/api")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Server is a running `api -dev -demo`.
type Server struct {
	URL             string // http://127.0.0.1:port
	ProvisioningKey string // sk_mgmt_… of the demo account
	StandardKey     string // sk_live_… of the demo account
	Banner          string // what the binary printed on stdout at start-up
	// DatabaseURL is the server's own database, for a test that sets up a state no API route
	// makes (an account paying for a subscription, say).
	DatabaseURL string

	stderr logtest.Buffer
}

// Logs is what the server has logged so far (JSON lines).
func (s *Server) Logs() string { return s.stderr.String() }

var (
	provisioningRE = regexp.MustCompile(`provisioning key \(management API\):\s+(sk_mgmt_[0-9A-Za-z]+)`)
	standardRE     = regexp.MustCompile(`standard key \(verify API\):\s+(sk_live_[0-9A-Za-z]+)`)
)

// Start runs `api -dev -demo` on a fresh database with env added to its environment (plan
// limits, for instance MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN), waits until it is ready, and stops
// it when t ends (SIGTERM, then SIGKILL after 10 s).
func Start(t testing.TB, env map[string]string) *Server {
	t.Helper()
	bin := binary(t)
	httpAddr, opsAddr := freeport.Addr(t), freeport.Addr(t)
	dbURL := pgtest.EmptyURL(t)
	environ := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL,
		"MAILVET_HTTP_ADDR=" + httpAddr,
		"MAILVET_METRICS_ADDR=" + opsAddr,
	}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	s := &Server{URL: "http://" + httpAddr, DatabaseURL: dbURL}
	var stdout logtest.Buffer
	cmd := exec.Command(bin, "-dev", "-demo")
	cmd.Dir = t.TempDir() // the embedded NATS store (.data/) goes here
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = &stdout, &s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("api did not stop within 10 s of SIGTERM")
		}
	})

	deadline := time.Now().Add(90 * time.Second) // a cold start migrates a fresh database
	for !strings.Contains(stdout.String(), "Mailvet is running") {
		select {
		case err := <-exited:
			t.Fatalf("api exited before it served: %v\n%s\n%s", err, stdout.String(), s.stderr.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("api printed no banner within 90 s:\n%s\n%s", stdout.String(), s.stderr.String())
		}
	}
	s.Banner = stdout.String()
	pm, sm := provisioningRE.FindStringSubmatch(s.Banner), standardRE.FindStringSubmatch(s.Banner)
	if pm == nil || sm == nil {
		t.Fatalf("no keys in the banner:\n%s", s.Banner)
	}
	s.ProvisioningKey, s.StandardKey = pm[1], sm[1]
	waitReady(t, s.URL+"/readyz", deadline)
	return s
}

func waitReady(t testing.TB, url string, deadline time.Time) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v %v", url, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
