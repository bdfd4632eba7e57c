// Package shutdown tests how Mailvet's real binaries stop on SIGTERM and SIGINT, as an operator
// rolling a deployment relies on (docs/operations.md, "Start-up and shutdown"): each process runs
// as its own process against real Postgres, a real NATS server and the simulated mail world of
// internal/mailsim, and is signalled while it has work in flight.
package shutdown

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/cluster"
	"github.com/mailvet/mailvet/internal/testkit/freeport"
	"github.com/mailvet/mailvet/internal/testkit/gobuild"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

const (
	domainOK   = "ok.example"   // every local part exists (250)
	domainSlow = "slow.example" // no local part exists, each RCPT answered after slowRcpt
	slowRcpt   = 3 * time.Second
	domainLong = "long.example" // no local part exists, each RCPT answered after longRcpt
	longRcpt   = 7 * time.Second
	domainHook = "hooks.example" // the webhook receiver's host name (127.0.0.1)
	secretsKey = "6d61696c766574207465737420636c7573746572207365616c6564206b657921"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds the three servers once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "mailvet-shutdown-"); buildErr != nil {
			return
		}
		buildErr = gobuild.Build(binDir, "./cmd/api", "./cmd/verifier-worker", "./cmd/webhook-worker")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// system is one deployment: a database, a NATS server, a mail world, and the processes a test
// adds to it.
type system struct {
	t     *testing.T
	bin   string
	sup   *cluster.Supervisor
	world *mailsim.World
	pool  *pgxpool.Pool
	env   []string
	key   string // a standard key of a scale-tier account
	n     int

	hookURL string // the receiver's callback URL, for asynchronous jobs
}

func newSystem(t *testing.T) *system {
	s := &system{t: t, bin: binaries(t), sup: cluster.New(t)}
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	for _, d := range []struct {
		name  string
		delay time.Duration
	}{{domainOK, 0}, {domainSlow, slowRcpt}, {domainLong, longRcpt}} {
		mx := "mx." + d.name
		if _, err := w.AddServer(mailsim.ServerOptions{Name: mx, ThrottleAfter: -1}); err != nil {
			t.Fatal(err)
		}
		w.AddDomain(d.name, mailsim.Domain{CatchAll: d.delay == 0, RcptDelay: d.delay, MX: []mailsim.MX{{Pref: 10, Host: mx}}})
	}
	w.AddDomain(domainHook, mailsim.Domain{A: []string{"127.0.0.1"}})
	s.world = w
	caFile := s.startReceiver()
	dbURL := pgtest.URL(t)
	s.pool = pgtest.Pool(t, dbURL)
	s.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL,
		"NATS_URL=" + natstest.URL(t),
		"MAILVET_DNS_RESOLVER=" + w.DNSAddr(),
		"MAILVET_SMTP_PORT=" + strconv.Itoa(w.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS=" + mailsim.Prefix.String(),
		"MAILVET_SMTP_HELO=shutdown-test.example",
		"MAILVET_SMTP_TIMEOUT=10s",
		"MAILVET_GREYLIST_WINDOW=0",
		"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN=1000000",
		"MAILVET_WEBHOOK_ALLOW_PRIVATE=true",
		"MAILVET_SECRETS_KEY=" + secretsKey,
		"MAILVET_DASHBOARD_SIGNUP=off",
		"SSL_CERT_FILE=" + caFile,
	}
	return s
}

// startReceiver serves the customers' HTTPS callback URL: it answers each callback 200. It returns the file of its CA, for SSL_CERT_FILE.
func (s *system) startReceiver() string {
	ca := tlstest.New(s.t, domainHook)
	caFile := filepath.Join(s.t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		s.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf}}
	srv.StartTLS()
	s.t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s.hookURL = "https://" + domainHook + ":" + port + "/callback"
	return caFile
}

// proc is a started process with its addresses.
type proc struct {
	*cluster.Proc
	url string // http://host:port of the API's main listener ("" for a worker)
	ops string // http://host:port of the ops listener
}

// start adds and starts bin with env on top of the system's, and waits for its /readyz.
func (s *system) start(bin string, env ...string) *proc {
	s.t.Helper()
	s.n++
	p := &proc{ops: "http://" + freeport.Addr(s.t)}
	env = append(env, "MAILVET_METRICS_ADDR="+strings.TrimPrefix(p.ops, "http://"))
	if bin == "api" {
		addr := freeport.Addr(s.t)
		p.url = "http://" + addr
		env = append(env, "MAILVET_HTTP_ADDR="+addr, "MAILVET_PUBLIC_URL="+p.url)
	}
	p.Proc = s.sup.Add(&cluster.Proc{Name: fmt.Sprintf("%s-%d", bin, s.n), Bin: filepath.Join(s.bin, bin),
		Env: append(append([]string(nil), s.env...), env...), ReadyURL: p.ops + "/readyz"})
	if err := p.Start(); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// account makes a scale-tier account with the admin commands and a standard key through api's
// management routes.
func (s *system) account(api *proc) {
	s.t.Helper()
	var acct struct {
		AccountID string `json:"account_id"`
	}
	s.admin(&acct, "create-account", "--tier", "scale", "--email", "shutdown-test@ok.example")
	var prov struct {
		Key string `json:"key"`
	}
	s.admin(&prov, "create-provisioning-key", "--account", acct.AccountID)
	resp, body := s.post(api, prov.Key, "/v1/management/keys", `{"label":"shutdown test"}`)
	var created struct {
		Key string `json:"key"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.Key == "" {
		s.t.Fatalf("create a standard key: %d %s", resp.StatusCode, body)
	}
	s.key = created.Key
}

func (s *system) admin(out any, args ...string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "api"), append([]string{"admin"}, args...)...)
	cmd.Env = s.env
	b, err := cmd.Output()
	if err != nil || json.Unmarshal(b, out) != nil {
		s.t.Fatalf("api admin %v: %v\n%s", args, err, b)
	}
}

// post sends body to api's path with key and reads the whole answer.
func (s *system) post(api *proc, key, path, body string) (*http.Response, []byte) {
	s.t.Helper()
	resp, err := s.do(api, key, path, body)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return resp, b
}

// do sends body to api's path with key (the system's key when empty) and returns the answer
// unread.
func (s *system) do(api *proc, key, path, body string) (*http.Response, error) {
	if key == "" {
		key = s.key
	}
	req, err := http.NewRequest(http.MethodPost, api.url+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// count runs a counting query.
func (s *system) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	pgtest.Must(s.t, s.pool.QueryRow(context.Background(), query, args...).Scan(&n), query)
	return n
}
