package cluster_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// syncAnswer is what one single verification got from the API.
type syncAnswer struct {
	code       int
	status     string
	retryAfter string
	took       time.Duration
	body       string
}

// Single verifications in flight when their verifier is killed with SIGKILL are answered by the
// other verifier within a few seconds, from the outside: the real binaries, a mail server slow
// enough (300 ms per RCPT) that the requests are still being probed at the kill. The workers'
// heartbeats are what tell the API that the killed verifier's requests need another worker;
// without them those requests would answer 503 at their 10 s deadline. A NATS node killed with
// requests in flight is answered within the same bound (docs/reliability.md).
func TestClusterSyncVerificationsOutliveAVerifierKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the fleet as separate processes; skipped with -short")
	}
	s := startSystem(t, profile{apis: 1, verifiers: 2, webhooks: 1, maxEmails: 10})
	if _, err := s.world.AddServer(mailsim.ServerOptions{Name: "mx.slow.example", ThrottleAfter: -1}); err != nil {
		t.Fatal(err)
	}
	users := make([]string, 32)
	for i := range users {
		users[i] = fmt.Sprintf("s%d", i)
	}
	s.world.AddDomain("slow.example", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.slow.example"}},
		Users: users, RcptDelay: 300 * time.Millisecond})

	// wave sends n single verifications at once, runs mid 400 ms later, and returns the answers.
	next := 0
	wave := func(n int, mid func()) []syncAnswer {
		out := make([]syncAnswer, n)
		var wg sync.WaitGroup
		for i := range n {
			body, _ := json.Marshal(map[string]string{"email": fmt.Sprintf("s%d@slow.example", next)})
			next++
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, s.apiURLs[0]+"/v1/email/verify", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+s.key)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
				if err != nil {
					out[i] = syncAnswer{code: -1, body: err.Error(), took: time.Since(start)}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var r struct{ Status string }
				_ = json.Unmarshal(b, &r)
				out[i] = syncAnswer{resp.StatusCode, r.Status, resp.Header.Get("Retry-After"), time.Since(start), string(b)}
			}()
		}
		time.Sleep(400 * time.Millisecond)
		mid()
		wg.Wait()
		return out
	}
	// check fails an answer that took longer than the bound, or that is not a verdict (nor, when
	// allowed, a 503 with Retry-After).
	const bound = 6 * time.Second
	check := func(what string, answers []syncAnswer, allow503 bool) {
		var slowest time.Duration
		for _, a := range answers {
			slowest = max(slowest, a.took)
			ok := a.code == http.StatusOK && a.status != ""
			if allow503 && a.code == http.StatusServiceUnavailable && a.retryAfter != "" {
				ok = true
			}
			if !ok || a.took > bound {
				t.Errorf("%s: %d after %v, want a verdict within %v: %s", what, a.code, a.took.Round(time.Millisecond), bound, a.body)
			}
		}
		t.Logf("%s: %d answered, the slowest after %v", what, len(answers), slowest.Round(time.Millisecond))
	}
	check("nothing killed", wave(6, func() {}), false)
	check("verifier-1 killed with requests in flight", wave(8, func() {
		if err := s.verifiers[0].Kill(); err != nil {
			t.Fatal(err)
		}
	}), false)
	check("NATS node nats-1 killed with requests in flight", wave(8, func() {
		if err := s.nats.Node("nats-1").Kill(); err != nil {
			t.Fatal(err)
		}
	}), true)
}
