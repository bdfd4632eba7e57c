package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// demoWant is what verifying one demo address must show.
type demoWant struct {
	status, failedCheck string // failedCheck "" means null
	check               func(result map[string]any) bool
}

var demoWants = map[string]demoWant{
	"ann@acme.example":      {"deliverable", "", func(r map[string]any) bool { return r["valid"] == true }},
	"zoe@acme.example":      {"undeliverable", "smtp", nil},
	"anyone@globex.example": {"catch_all", "", func(r map[string]any) bool { return r["catch_all"] == true }},
	"bob@initech.example":   {"unknown", "", func(r map[string]any) bool { return r["smtp_blocked"] == false && r["mx_found"] == true }},
	"ann@mail.example":      {"unknown", "", func(r map[string]any) bool { return r["smtp_blocked"] == true }},
	"temp@mailinator.com":   {"invalid", "disposable", func(r map[string]any) bool { return r["disposable"] == true }},
	"ann@mial.example":      {"invalid", "no_mx", func(r map[string]any) bool { return r["suggestion"] == "mail.example" }},
}

var (
	standardKeyRE = regexp.MustCompile(`standard key \(verify API\):\s+(sk_live_[0-9A-Za-z]+)`)
	demoLineRE    = regexp.MustCompile(`(?m)^  (\S+@\S+)  +\S`)
)

// waitBanner waits until the dev banner is complete on s's stdout and returns it.
func waitBanner(t *testing.T, s *served) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.stdout.String(), "Mailvet is running") {
		if time.Now().After(deadline) {
			t.Fatalf("no banner:\n%s\n%s", s.stdout.String(), s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.stdout.String()
}

// demoAddresses are the addresses the banner lists after "Demo world".
func demoAddresses(t *testing.T, banner string) []string {
	t.Helper()
	_, section, ok := strings.Cut(banner, "Demo world")
	if !ok {
		t.Fatalf("banner lists no demo world:\n%s", banner)
	}
	var emails []string
	for _, m := range demoLineRE.FindAllStringSubmatch(section, -1) {
		emails = append(emails, m[1])
	}
	return emails
}

// verifyOne verifies email through the HTTP API with key.
func verifyOne(t *testing.T, addr, key, email string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/email/verify", strings.NewReader(`{"email":"`+email+`"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d, %v %v", email, resp.StatusCode, r, err)
	}
	return r
}

// `make demo`: every demo address the banner prints shows its outcome through the HTTP API with
// the printed standard key, with no route to the internet needed. The embedded NATS store goes
// into a temporary directory and the database is a fresh one, so a developer's `make run` is
// never touched.
func TestDemoWorldShowsEveryOutcome(t *testing.T) {
	t.Chdir(t.TempDir())
	s := startServing(t, []string{"-dev", "-demo"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)})
	banner := waitBanner(t, s)
	m := standardKeyRE.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no standard key in the banner:\n%s", banner)
	}
	key := m[1]
	emails := demoAddresses(t, banner)
	if len(emails) != len(demoWants) {
		t.Errorf("banner lists %v, want the %d addresses of demoWants", emails, len(demoWants))
	}
	for _, email := range emails {
		want, ok := demoWants[email]
		if !ok {
			t.Errorf("%s: printed but not expected", email)
			continue
		}
		if !strings.HasSuffix(email, ".example") && email != "temp@mailinator.com" {
			t.Errorf("%s: a demo domain must be unable to exist on the internet (.example)", email)
		}
		r := verifyOne(t, s.httpAddr, key, email)
		failed, _ := r["failed_check"].(string)
		if r["status"] != want.status || failed != want.failedCheck || (want.check != nil && !want.check(r)) {
			t.Errorf("%s: %v, want status %s, failed_check %q", email, r, want.status, want.failedCheck)
		}
	}
	s.stop(t)
}
