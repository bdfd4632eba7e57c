package shutdown

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/cluster"
	"github.com/mailvet/mailvet/internal/testkit/freeport"
)

// emailsBody is a JSON body {"emails": [...]} of n addresses prefix0@domain, prefix1@domain, ….
func emailsBody(n int, domain, prefix string) string {
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("%q", fmt.Sprintf("%s%d@%s", prefix, i, domain))
	}
	return `{"emails":[` + strings.Join(list, ",") + `]}`
}

// signal sends sig to p's current run.
func signal(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(p.Pid(), sig); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits up to limit for p to exit and returns how long it took; it fails the test if
// p is still running then.
func waitExit(t *testing.T, p *proc, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for p.Running() {
		if time.Since(start) > limit {
			t.Fatalf("%s still running %s after the signal", p.Name, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// usageOf counts the usage rows of addresses that start with prefix.
func (s *system) usageOf(prefix string) int {
	return s.count(`SELECT count(*) FROM usage_log WHERE snapshot->>'email' LIKE $1`, prefix+"%")
}

// An API replica told to stop while requests are in flight (docs/operations.md, "Start-up and
// shutdown"): a single verification still waiting for its verifier is answered in full, not cut
// off, and billed once; a batch ends with a 503 and bills nothing; a stream ends with its error
// line, which lists exactly the addresses without a line, and only the lines written are billed;
// no hold is left behind, and the process exits within the documented bound.
func TestAPIDrainsRequestsInFlight(t *testing.T) {
	s := newSystem(t)
	api := s.start("api")
	s.start("verifier-worker")
	s.account(api)

	single := make(chan string, 1)
	go func() {
		resp, err := s.do(api, "", "/v1/email/verify", `{"email":"one@slow.example"}`)
		if err != nil {
			single <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		single <- fmt.Sprintf("%d %s %v", resp.StatusCode, b, err)
	}()
	batch := make(chan string, 1)
	go func() {
		resp, err := s.do(api, "", "/v1/email/verify/batch", emailsBody(3, domainLong, "batch"))
		if err != nil {
			batch <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		batch <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	stream, err := s.do(api, "", "/v1/email/verify/stream", emailsBody(4, domainLong, "stream"))
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", stream, err)
	}
	defer stream.Body.Close()

	time.Sleep(500 * time.Millisecond) // every request has reached its verifier
	signal(t, api, syscall.SIGTERM)
	// The stream: some lines perhaps, then the error line naming the rest.
	var results, missing int
	var errLine string
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
		var line struct {
			Email  string   `json:"email"`
			Error  string   `json:"error"`
			Emails []string `json:"emails"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stream line %q: %v", sc.Text(), err)
		}
		if line.Error != "" {
			errLine, missing = line.Error, len(line.Emails)
			continue
		}
		results++
	}
	if sc.Err() != nil || errLine != "service_unavailable" || results+missing != 4 {
		t.Errorf("stream: %d results, error line %q naming %d addresses, read error %v; want its error line naming the rest of 4",
			results, errLine, missing, sc.Err())
	}
	if got := <-batch; !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "service_unavailable") {
		t.Errorf("batch: %s; want a 503 service_unavailable", got)
	}
	if got := <-single; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"email":"one@slow.example"`) {
		t.Errorf("single verification cut by the shutdown: %s; want its 200 answer", got)
	}
	took := waitExit(t, api, app.ShutdownGrace+5*time.Second)
	t.Logf("the API exited %s after SIGTERM", took.Round(time.Millisecond))

	if n := s.usageOf("one@"); n != 1 {
		t.Errorf("single verification: %d usage rows, want 1", n)
	}
	if n := s.usageOf("batch"); n != 0 {
		t.Errorf("batch answered 503: %d usage rows, want none", n)
	}
	if n := s.usageOf("stream"); n != results {
		t.Errorf("stream: %d usage rows for %d result lines", n, results)
	}
	if n := s.count(`SELECT count(*) FROM usage_holds`); n != 0 {
		t.Errorf("%d usage holds left behind by a replica that stopped cleanly", n)
	}
}

// job queues an asynchronous verification of email through api and returns its id.
func (s *system) job(api *proc, email string) string {
	s.t.Helper()
	resp, b := s.post(api, "", "/v1/email/verify", fmt.Sprintf(`{"email":%q,"webhook_url":%q,"webhook_secret":"shutdown-secret"}`, email, s.hookURL))
	var j struct {
		JobID string `json:"job_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &j) != nil {
		s.t.Fatalf("async verification: %d %s", resp.StatusCode, b)
	}
	return j.JobID
}

// A verifier worker told to stop finishes the job it holds before it exits; a second signal
// (SIGINT after SIGTERM: an operator's Ctrl-C, an impatient supervisor) ends it at once instead
// of waiting out the drain (docs/operations.md, "Start-up and shutdown").
func TestVerifierFinishesItsJobUnlessSignalledTwice(t *testing.T) {
	s := newSystem(t)
	api := s.start("api")
	s.account(api)

	v := s.start("verifier-worker")
	id := s.job(api, "first@slow.example")
	time.Sleep(500 * time.Millisecond) // the worker holds the job: its probe takes 6 s
	signal(t, v, syscall.SIGTERM)
	took := waitExit(t, v, 30*time.Second)
	if n := s.count(`SELECT count(*) FROM jobs WHERE id = $1 AND state = 'completed'`, id); n != 1 || took < 2*time.Second {
		t.Errorf("the worker exited %s after SIGTERM with its job completed: %v; want it to finish the job first", took, n == 1)
	}

	v = s.start("verifier-worker")
	s.job(api, "second@long.example")
	time.Sleep(500 * time.Millisecond) // the worker holds the job: its probe takes 7 s or more
	signal(t, v, syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	signal(t, v, syscall.SIGINT)
	if took := waitExit(t, v, 30*time.Second); took > 2*time.Second {
		t.Errorf("the worker exited %s after a second signal; want at once", took.Round(time.Millisecond))
	}
}

// A process told to stop while it still waits for NATS at start-up exits 0 at once: the
// orchestrator stopping a pod that never became ready must not see a crash (docs/operations.md,
// "What you run").
func TestSignalDuringStartUp(t *testing.T) {
	s := newSystem(t)
	for i, bin := range []string{"api", "verifier-worker", "webhook-worker"} {
		p := &proc{ops: "http://" + freeport.Addr(t)}
		env := append(append([]string(nil), s.env...), "NATS_URL=nats://127.0.0.1:1", "MAILVET_METRICS_ADDR="+strings.TrimPrefix(p.ops, "http://"),
			"MAILVET_HTTP_ADDR="+freeport.Addr(t))
		p.Proc = s.sup.Add(&cluster.Proc{Name: fmt.Sprintf("starting-%s-%d", bin, i), Bin: filepath.Join(s.bin, bin), Env: env})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := http.Get(p.ops + "/readyz")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "waiting for NATS") {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never waited for NATS: %v", bin, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		signal(t, p, syscall.SIGTERM)
		if took := waitExit(t, p, 5*time.Second); took > 2*time.Second {
			t.Errorf("%s exited %s after SIGTERM during start-up; want at once", bin, took)
		}
		if err := p.ExitErr(); err != nil {
			t.Errorf("%s: exit %v after SIGTERM during start-up; want 0", bin, err)
		}
	}
}

// With MAILVET_SHUTDOWN_DELAY, an API replica told to stop fails /readyz at once, on both
// listeners, so that a load balancer probing it takes it out of rotation, while it still answers
// requests on new connections; only after the delay does it refuse connections and drain
// (docs/operations.md, "Start-up and shutdown").
func TestAPIGoesUnreadyBeforeItStopsAccepting(t *testing.T) {
	s := newSystem(t)
	api := s.start("api", "MAILVET_SHUTDOWN_DELAY=2s")
	s.start("verifier-worker")
	s.account(api)

	signal(t, api, syscall.SIGTERM)
	signalled := time.Now()
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for _, u := range []string{api.url + "/readyz", api.ops + "/readyz"} {
		for deadline := time.Now().Add(time.Second); ; {
			resp, err := fresh.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v %v a second after SIGTERM; want 503 while the replica still serves", u, resp, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, api.url+"/v1/email/verify", strings.NewReader(`{"email":"late@ok.example"}`))
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := fresh.Do(req)
	if err != nil {
		t.Fatalf("a request on a new connection during the delay: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || time.Since(signalled) > 2*time.Second {
		t.Errorf("a request on a new connection %s after SIGTERM: %d; want it answered during the delay", time.Since(signalled), resp.StatusCode)
	}
	waitExit(t, api, app.ShutdownGrace+5*time.Second)
	if took := time.Since(signalled); took < 2*time.Second {
		t.Errorf("the API exited %s after SIGTERM; want it to serve for the 2 s delay first", took)
	}
	if err := api.ExitErr(); err != nil {
		t.Errorf("exit: %v", err)
	}
}
