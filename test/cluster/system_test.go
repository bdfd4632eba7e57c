package cluster_test

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
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/cluster"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/webhook"
)

// The mail world of the test (internal/mailsim, in the test process). Every address the load
// sends is new, and its local part's first letter decides its known outcome (see expected).
const (
	domainOK      = "ok.example"    // d… exist (250), u… do not (550 5.1.1)
	domainCatch   = "catch.example" // accepts every address
	domainNoMX    = "nomx.example"  // NXDOMAIN: invalid, no_mx
	domainHooks   = "hooks.example" // the webhook receiver's host name (A 127.0.0.1)
	webhookSecret = "cluster-test-secret"
)

// system is the whole deployment on loopback: a NATS cluster, the API replicas, the verifier and
// webhook workers as separate processes, the mail world and the webhook receiver.
type system struct {
	t         *testing.T
	sup       *cluster.Supervisor
	nats      *cluster.NATSCluster
	apis      []*cluster.Proc
	apiURLs   []string
	verifiers []*cluster.Proc
	webhooks  []*cluster.Proc
	world     *mailsim.World
	recv      *receiver
	hookURL   string
	pool      *pgxpool.Pool
	accountID string
	key       string // standard key of the test account (scale tier)
	bin       string // directory of the built binaries
	baseEnv   []string

	rotMu    sync.Mutex
	rotation []bool // API replicas the load balancer sends to
}

// clusterSecretsKey is the test deployment's MAILVET_SECRETS_KEY (32 bytes as 64 hex digits).
const clusterSecretsKey = "6d61696c766574207465737420636c7573746572207365616c6564206b657921"

// startSystem builds the binaries and starts everything, waiting until every process is ready.

func startSystem(t *testing.T, p profile) *system {
	natsBin := cluster.NATSServerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &system{t: t}
	start := time.Now()
	s.bin = cluster.Build(t, "./cmd/api", "./cmd/verifier-worker", "./cmd/webhook-worker")
	t.Logf("built the binaries in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	s.sup = cluster.New(t)

	s.startWorld(p.maxEmails)
	s.startReceiver()
	dbURL := pgtest.URL(t)
	s.pool = pgtest.Pool(t, dbURL)
	s.nats = cluster.StartNATSCluster(ctx, t, s.sup, natsBin, 3)

	s.baseEnv = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL,
		"NATS_URL=" + s.nats.URLs(),
		"MAILVET_STREAM_REPLICAS=3",
		"MAILVET_DNS_RESOLVER=" + s.world.DNSAddr(),
		"MAILVET_SMTP_PORT=" + strconv.Itoa(s.world.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS=" + mailsim.Prefix.String(),
		"MAILVET_SMTP_HELO=cluster-test.example",
		"MAILVET_GREYLIST_WINDOW=0",
		// The load is far above the scale tier's 1,000 a minute; rate limits are not under test.
		"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN=1000000",
		"SSL_CERT_FILE=" + s.recv.caFile,
		"MAILVET_WEBHOOK_ALLOW_PRIVATE=true",
		// Every API and webhook worker of a deployment shares one key (docs/operations.md,
		// "Secrets at rest"); the verifiers get it too here, as a shared environment would.
		"MAILVET_SECRETS_KEY=" + clusterSecretsKey,
		// The API starts without a mail relay only when sign-up needs none (docs/operations.md, "Mail").
		"MAILVET_DASHBOARD_SIGNUP=off",
	}
	ports := cluster.FreePorts(t, 2*p.apis+p.verifiers+p.webhooks)
	addr := func() string {
		a := "127.0.0.1:" + strconv.Itoa(ports[0])
		ports = ports[1:]
		return a
	}
	for i := range p.apis {
		http, ops := addr(), addr()
		s.apiURLs = append(s.apiURLs, "http://"+http)
		s.apis = append(s.apis, s.add(fmt.Sprintf("api-%d", i+1), "api", "http://"+http+"/readyz",
			"MAILVET_HTTP_ADDR="+http, "MAILVET_METRICS_ADDR="+ops, "MAILVET_PUBLIC_URL=http://"+http))
		s.rotation = append(s.rotation, true)
	}
	for i := range p.verifiers {
		ops := addr()
		s.verifiers = append(s.verifiers, s.add(fmt.Sprintf("verifier-%d", i+1), "verifier-worker", "http://"+ops+"/readyz",
			"MAILVET_METRICS_ADDR="+ops))
	}
	for i := range p.webhooks {
		ops := addr()
		s.webhooks = append(s.webhooks, s.add(fmt.Sprintf("webhook-%d", i+1), "webhook-worker", "http://"+ops+"/readyz",
			"MAILVET_METRICS_ADDR="+ops))
	}
	for _, pr := range s.mailvetProcs() {
		if err := pr.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, pr := range s.mailvetProcs() {
		if err := pr.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("3 NATS nodes, %d API replicas, %d verifiers, %d webhook workers started and ready in %s",
		p.apis, p.verifiers, p.webhooks, time.Since(start).Round(time.Millisecond))
	s.createAccount(ctx)
	return s
}

func (s *system) add(name, bin, ready string, env ...string) *cluster.Proc {
	return s.sup.Add(&cluster.Proc{Name: name, Bin: filepath.Join(s.bin, bin), ReadyURL: ready,
		Env: append(append([]string(nil), s.baseEnv...), env...)})
}

func (s *system) mailvetProcs() []*cluster.Proc {
	var ps []*cluster.Proc
	ps = append(ps, s.apis...)
	ps = append(ps, s.verifiers...)
	return append(ps, s.webhooks...)
}

// startWorld scripts the mail world: n possible deliverable mailboxes d0…d<n-1> (a map, looked
// up at once, rather than a list of users scanned at every RCPT).
func (s *system) startWorld(n int) {
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(w.Close)
	boxes := make(map[string]mailsim.Reply, n)
	for i := range n {
		boxes["d"+strconv.Itoa(i)] = mailsim.ReplyOK
	}
	for _, d := range []struct {
		name   string
		script mailsim.Domain
	}{
		{domainOK, mailsim.Domain{Mailboxes: boxes}},
		{domainCatch, mailsim.Domain{CatchAll: true}},
	} {
		mx := "mx." + d.name
		// No Postfix-like throttle: half of ok.example's probes are rejected on purpose.
		if _, err := w.AddServer(mailsim.ServerOptions{Name: mx, ThrottleAfter: -1}); err != nil {
			s.t.Fatal(err)
		}
		d.script.MX = []mailsim.MX{{Pref: 10, Host: mx}}
		w.AddDomain(d.name, d.script)
	}
	w.AddDomain(domainHooks, mailsim.Domain{A: []string{"127.0.0.1"}})
	s.world = w
}

// createAccount makes a scale-tier account and its provisioning key with the admin commands of
// the api binary (docs/operations.md, "bin/api admin"), and a standard key through the
// management API.
func (s *system) createAccount(ctx context.Context) {
	var acct struct {
		AccountID string `json:"account_id"`
	}
	s.admin(ctx, &acct, "create-account", "--tier", "scale", "--email", "cluster-test@ok.example")
	var prov struct {
		Key string `json:"key"`
	}
	s.admin(ctx, &prov, "create-provisioning-key", "--account", acct.AccountID)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURLs[0]+"/v1/management/keys",
		bytes.NewReader([]byte(`{"label":"cluster test"}`)))
	req.Header.Set("Authorization", "Bearer "+prov.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var created struct {
		Key string `json:"key"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.Key == "" {
		s.t.Fatalf("create a standard key: %d %s", resp.StatusCode, body)
	}
	s.accountID, s.key = acct.AccountID, created.Key
}

func (s *system) admin(ctx context.Context, out any, args ...string) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "api"), append([]string{"admin"}, args...)...)
	cmd.Env = s.baseEnv
	b, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("api admin %v: %v\n%s", args, err, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		s.t.Fatalf("api admin %v: %v\n%s", args, err, b)
	}
}

// pick is the API replica the load balancer sends the next request to: round robin over the
// replicas in rotation.
func (s *system) pick(n int) int {
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	for i := range s.rotation {
		j := (n + i) % len(s.rotation)
		if s.rotation[j] {
			return j
		}
	}
	return n % len(s.rotation)
}

// rotate takes replica i out of the load balancer's rotation or puts it back.
func (s *system) rotate(i int, in bool) {
	s.rotMu.Lock()
	s.rotation[i] = in
	s.rotMu.Unlock()
}

// receiver is the customers' HTTPS webhook endpoint: it checks every signature and counts the
// callbacks per job (or list) it acknowledged.
type receiver struct {
	srv    *httptest.Server
	caFile string

	mu       sync.Mutex
	jobs     map[string]int // job id ⇒ callbacks answered 2xx
	lists    map[string]int // list id ⇒ completion callbacks answered 2xx
	badSig   int
	attempts map[string][]string // job id ⇒ X-Mailvet-Attempt of each callback, for the report
}

func (s *system) startReceiver() {
	ca := tlstest.New(s.t, domainHooks)
	r := &receiver{jobs: map[string]int{}, lists: map[string]int{}, attempts: map[string][]string{}}
	r.caFile = filepath.Join(s.t.TempDir(), "ca.pem")
	if err := os.WriteFile(r.caFile, ca.PEM, 0o600); err != nil {
		s.t.Fatal(err)
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf}}
	r.srv.StartTLS()
	s.t.Cleanup(r.srv.Close)
	_, port, _ := net.SplitHostPort(r.srv.Listener.Addr().String())
	s.hookURL = "https://" + domainHooks + ":" + port + "/callback"
	s.recv = r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// Both schemes on every callback: X-Service-Signature, and the Standard Webhooks headers
	// signed by whichever webhook worker made the attempt (each opens the sealed secret with the
	// deployment's MAILVET_SECRETS_KEY).
	if webhook.Verify(body, req.Header.Get("X-Service-Signature"), webhookSecret) != nil ||
		webhook.VerifyRequest(req.Header, body, webhookSecret, webhook.VerifyOptions{RequireStandard: true}) != nil {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var cb struct {
		JobID string `json:"job_id"`
		Event string `json:"event"`
		List  struct {
			ID string `json:"id"`
		} `json:"list"`
	}
	_ = json.Unmarshal(body, &cb)
	r.mu.Lock()
	switch {
	case cb.JobID != "":
		r.jobs[cb.JobID]++
		r.attempts[cb.JobID] = append(r.attempts[cb.JobID], req.Header.Get("X-Mailvet-Attempt"))
	case cb.List.ID != "":
		r.lists[cb.List.ID]++
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
