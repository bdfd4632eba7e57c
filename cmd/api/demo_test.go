package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// demoWant is what verifying one demo address must show.
type demoWant struct {
	status, failedCheck string // failedCheck "" means null
	check               func(result client.Result) bool
}

var demoWants = map[string]demoWant{
	"ann@acme.example":      {"deliverable", "", func(r client.Result) bool { return r.Valid }},
	"zoe@acme.example":      {"undeliverable", "smtp", nil},
	"anyone@globex.example": {"catch_all", "", func(r client.Result) bool { return r.CatchAll }},
	"bob@initech.example":   {"unknown", "", func(r client.Result) bool { return !r.SMTPBlocked && r.MXFound }},
	"ann@mail.example":      {"unknown", "", func(r client.Result) bool { return r.SMTPBlocked }},
	"temp@mailinator.com":   {"invalid", "disposable", func(r client.Result) bool { return r.Disposable }},
	"ann@mial.example":      {"invalid", "no_mx", func(r client.Result) bool { return r.Suggestion == "mail.example" }},
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

// verifyOne verifies email through the HTTP API with key, using the official Go client (the
// project's own end-to-end tests speak HTTP through it, so it is exercised on every run).
func verifyOne(t *testing.T, addr, key, email string) client.Result {
	t.Helper()
	c := client.New(key, client.WithBaseURL("http://"+addr), client.WithTimeout(30*time.Second))
	r, err := c.Verify(context.Background(), email)
	if err != nil {
		t.Fatalf("%s: %v", email, err)
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
		if r.Email != email || r.Status != want.status || r.FailedCheck != want.failedCheck || (want.check != nil && !want.check(r)) {
			t.Errorf("%s: %+v, want status %s, failed_check %q", email, r, want.status, want.failedCheck)
		}
	}
	s.stop(t)
}

// The demo's simulated answers stay in the demo: a real domain, which the simulator says does not
// exist, must not reach the fleet's shared MX cache in the embedded NATS store, where a later
// `make run` in the same directory would read "no mail" for it for 15 minutes.
func TestDemoAnswersStayInTheDemo(t *testing.T) {
	t.Chdir(t.TempDir())
	const real = "ann@mailvet-demo-leak-check.com"
	s := startServing(t, []string{"-dev", "-demo"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)})
	key := standardKeyRE.FindStringSubmatch(waitBanner(t, s))
	if key == nil {
		t.Fatal("no standard key in the demo's banner")
	}
	if r := verifyOne(t, s.httpAddr, key[1], real); r.Status != "invalid" || r.FailedCheck != "no_mx" {
		t.Fatalf("in the demo: %+v, want the simulator's no_mx", r)
	}
	s.stop(t)

	// `make run` in the same directory, with no DNS to ask: the domain's answer must be a DNS
	// error, not the demo's "no mail" read back from the shared cache.
	d := startServing(t, []string{"-dev"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t), "MAILVET_DNS_RESOLVER": "127.0.0.1:1"})
	key = standardKeyRE.FindStringSubmatch(waitBanner(t, d))
	if key == nil {
		t.Fatal("no standard key in the dev banner")
	}
	if r := verifyOne(t, d.httpAddr, key[1], real); r.Status != "unknown" || r.Reason != "dns_error" {
		t.Errorf("after the demo: %+v, want unknown/dns_error (the demo's answer leaked into the shared cache)", r)
	}
	d.stop(t)
}
