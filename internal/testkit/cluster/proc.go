// Package cluster runs Mailvet's real binaries and a real NATS cluster as separate processes on
// loopback, for the cluster fault test (test/cluster, docs/reliability.md "Cluster fault test"):
// a process supervisor that starts, kills (SIGKILL), stops (SIGTERM) and restarts each process
// with its own environment, waits for its /readyz, and keeps its output in a log file under the
// test's temporary directory, whose tail is printed when the test fails.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/gobuild"
)

// Proc is one supervised process. It can be started again after it exited or was killed; each
// run appends to the same log file, after a line that says which run follows.
type Proc struct {
	Name     string   // for logs and the failure report, e.g. "verifier-2"
	Bin      string   // the executable
	Args     []string // its arguments
	Env      []string // its whole environment (KEY=value)
	ReadyURL string   // polled by WaitReady: 200 means ready
	LogPath  string   // stdout and stderr of every run

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run has exited
	err    error         // the current run's exit status, once exited
	runs   int
}

// Start runs the process. It fails if the process is already running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.exited) {
		return fmt.Errorf("%s: already running", p.Name)
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.runs++
	fmt.Fprintf(f, "=== %s run %d started %s\n", p.Name, p.runs, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a signal to the test's group (Ctrl-C) must not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Running reports whether the current run has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.exited)
}

// Pid is the process id of the current run (0 before the first).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL (kill -9) and waits until the process is gone.
func (p *Proc) Kill() error {
	cmd, exited := p.current()
	if cmd == nil || isClosed(exited) {
		return fmt.Errorf("%s: not running", p.Name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("%s: kill: %w", p.Name, err)
	}
	<-exited
	return nil
}

// Stop sends SIGTERM and waits up to timeout for the process to exit; then it kills it and says
// so in the error. A clean exit (status 0) returns nil.
func (p *Proc) Stop(timeout time.Duration) error {
	cmd, exited := p.current()
	if cmd == nil || isClosed(exited) {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: SIGTERM: %w", p.Name, err)
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.Name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("%s exited after SIGTERM: %w", p.Name, p.err)
	}
	return nil
}

// ExitErr is how the last run ended once it has exited: nil for status 0, else the
// *exec.ExitError (a status, or the signal that killed it).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.exited
}

// WaitReady polls ReadyURL until it answers 200, the process exits, or ctx ends.
func (p *Proc) WaitReady(ctx context.Context) error {
	_, exited := p.current()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(p.ReadyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it was ready", p.Name)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (%s): %w", p.Name, p.ReadyURL, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Tail is the last n lines of the process's log file.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Log is the whole log file.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Supervisor owns the processes of one test: it gives each a log file under dir, stops them all
// (SIGTERM, then SIGKILL) when the test ends, and prints the tail of every log if it failed. The
// directory is removed when the test passed and kept (its path printed) when it failed, so that
// the whole logs can be read afterwards.
type Supervisor struct {
	t   testing.TB
	dir string

	mu    sync.Mutex
	procs []*Proc
}

// New returns a supervisor for t, with its logs under a new temporary directory.
func New(t testing.TB) *Supervisor {
	dir, err := os.MkdirTemp("", "mailvet-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{t: t, dir: dir}
	t.Cleanup(s.cleanup)
	return s
}

// Dir is the supervisor's directory: logs, and whatever the processes need on disk.
func (s *Supervisor) Dir() string { return s.dir }

// Add registers a process (not started). Its log goes to <dir>/<name>.log.
func (s *Supervisor) Add(p *Proc) *Proc {
	p.LogPath = filepath.Join(s.dir, p.Name+".log")
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// Procs are the registered processes.
func (s *Supervisor) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.procs...)
}

func (s *Supervisor) cleanup() {
	procs := s.Procs()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(10 * time.Second); err != nil {
				s.t.Logf("cleanup: %v", err)
			}
		}()
	}
	wg.Wait()
	if !s.t.Failed() {
		os.RemoveAll(s.dir)
		return
	}
	for _, p := range procs {
		s.t.Logf("--- last lines of %s (%s):\n%s", p.Name, p.LogPath, p.Tail(40))
	}
	s.t.Logf("the whole logs (and the NATS stores) are kept in %s", s.dir)
}

// Build compiles the main packages pkgs (like "./cmd/api") into a new temporary directory of
// t's and returns it (gobuild.Build: deployment binaries, without -race).
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := gobuild.Build(dir, pkgs...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// FreePorts returns n distinct loopback TCP ports that the kernel just handed out. They are
// released before they are returned, so another process could take one in between; on a test
// machine that is rare, and a process that fails to listen says so in its log.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}
