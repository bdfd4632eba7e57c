package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/demoapi"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// End-to-end: the client against the real `api -dev -demo` binary (internal/testkit/demoapi),
// in the demo world whose addresses show every outcome.

func TestMain(m *testing.M) { demoapi.Main(m) }

// roomy lifts the demo account's free-tier limits so that tests are not paced by them.
var roomy = map[string]string{
	"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "100000",
	"MAILVET_PLAN_FREE_MONTHLY_CALLS":      "100000",
	"MAILVET_PLAN_FREE_MAX_KEYS":           "5",
}

// demoWants is the status and reason each demo address shows (docs/development.md, "The demo world").
var demoWants = map[string][2]string{
	"ann@acme.example":      {"deliverable", "accepted"},
	"zoe@acme.example":      {"undeliverable", "mailbox_unknown"},
	"anyone@globex.example": {"catch_all", "catch_all"},
	"bob@initech.example":   {"unknown", "greylisted"},
	"ann@mail.example":      {"unknown", "provider_blocks_probes"},
	"temp@mailinator.com":   {"invalid", "disposable"},
	"ann@mial.example":      {"invalid", "no_mx"},
}

// demoReplies is the smtp_reply code and enhanced code each demo address shows; "" for none.
var demoReplies = map[string][2]string{
	"ann@acme.example":    {"250", "2.0.0"},
	"zoe@acme.example":    {"550", "5.1.1"},
	"bob@initech.example": {"450", "4.7.1"},
	"ann@mail.example":    {"", ""},
	"temp@mailinator.com": {"", ""},
	"ann@mial.example":    {"", ""},
}

func TestE2EVerifyShowsEveryOutcome(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithTimeout(30*time.Second))
	ctx := context.Background()
	if len(mailsim.DemoAddresses) != len(demoWants) {
		t.Fatalf("the demo world has %d addresses, the test knows %d", len(mailsim.DemoAddresses), len(demoWants))
	}
	for _, a := range mailsim.DemoAddresses {
		r, err := c.Verify(ctx, a.Email)
		if err != nil {
			t.Fatalf("%s: %v", a.Email, err)
		}
		if want := demoWants[a.Email]; r.Email != a.Email || r.Status != want[0] || r.Reason != want[1] {
			t.Errorf("%s: %+v, want %v", a.Email, r, want)
		}
		// The verdict's evidence: the demo mail server's reply, and none where no server was
		// asked. (The catch-all domain's answer may come from a cache, without a reply.)
		if want, ok := demoReplies[a.Email]; ok {
			got := r.SMTPReply
			switch {
			case want[0] == "" && got != nil:
				t.Errorf("%s: smtp_reply %+v, want none: no server was asked", a.Email, *got)
			case want[0] != "" && (got == nil || fmt.Sprint(got.Code) != want[0] || got.EnhancedCode != want[1] || got.Text == ""):
				t.Errorf("%s: smtp_reply %+v, want %v with its text", a.Email, got, want)
			}
		}
	}
	if r, _ := c.Verify(ctx, "ann@mial.example"); r.Suggestion != "mail.example" || r.FailedCheck != "no_mx" || r.MXHost != "" {
		t.Errorf("typo: %+v", r)
	}

	// Batches of any length come back in input order: 130 addresses are three requests.
	emails := make([]string, 130)
	for i := range emails {
		switch i % 3 {
		case 0:
			emails[i] = fmt.Sprintf("user%03d@globex.example", i) // catch-all: an SMTP round trip
		case 1:
			emails[i] = fmt.Sprintf("user%03d@mailinator.com", i) // decided locally, fast
		default:
			emails[i] = mailsim.DemoAddresses[i%len(mailsim.DemoAddresses)].Email
		}
	}
	results, err := c.VerifyBatch(ctx, emails)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(emails) {
		t.Fatalf("%d results for %d addresses", len(results), len(emails))
	}
	for i, r := range results {
		if r.Email != emails[i] || r.Index != i {
			t.Fatalf("result %d is for %s with index %d, want %s: not in input order", i, r.Email, r.Index, emails[i])
		}
		if i%3 == 1 && r.Status != client.StatusInvalid {
			t.Errorf("%s: %s", r.Email, r.Status)
		}
	}

	// Streams of more than 1,000 addresses are two requests; every address has its line.
	many := make([]string, 1050)
	for i := range many {
		many[i] = fmt.Sprintf("s%04d@mailinator.com", i)
	}
	many[1049] = "ann@acme.example"
	seen := map[string]client.Result{}
	for r, err := range c.VerifyStream(ctx, many) {
		if err != nil {
			t.Fatal(err)
		}
		seen[r.Email] = r
	}
	if len(seen) != len(many) || seen["ann@acme.example"].Status != client.StatusDeliverable || seen["s0000@mailinator.com"].FailedCheck != "disposable" {
		t.Errorf("stream: %d distinct results for %d addresses", len(seen), len(many))
	}
	// Breaking out of the loop stops the iteration cleanly.
	n := 0
	for _, err := range c.VerifyStream(ctx, many[:20]) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}

	// Asynchronous: 202, then the job completes (its callback cannot be delivered offline,
	// which does not concern the job).
	acc, err := c.VerifyAsync(ctx, "ann@acme.example", client.AsyncOptions{WebhookURL: "https://hooks.example.com/mailvet", WebhookSecret: "at-least-8-chars"})
	if err != nil || acc.Status != client.JobPending || acc.JobID == "" {
		t.Fatalf("VerifyAsync = %+v, %v", acc, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var job client.Job
	for {
		if job, err = c.Job(ctx, acc.JobID); err != nil {
			t.Fatal(err)
		}
		if job.Done() || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if job.Status != client.JobCompleted || job.Result == nil || job.Result.JobID != acc.JobID || job.Result.Status != client.StatusDeliverable || job.CompletedAt == nil {
		t.Errorf("job = %+v (result %+v)", job, job.Result)
	}
	_, err = c.Job(ctx, "6f1d2f0e-0000-4000-8000-000000000000")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != client.CodeJobNotFound {
		t.Errorf("unknown job: %v", err)
	}
	// Bad input is the API's 400, named.
	_, err = c.VerifyAsync(ctx, "ann@acme.example", client.AsyncOptions{WebhookURL: "http://127.0.0.1/hook"})
	if !errors.As(err, &e) || e.Code != client.CodeInvalidRequest {
		t.Errorf("bad webhook URL: %v", err)
	}
}

// A streamed result's Index is the position in the caller's input of the address it answers,
// across requests: inputs that differ only in the domain's case or surrounding blanks, and an
// address given again, all come back with the same Email, and only Index tells them apart
// (docs/api.md, "Verify a stream"). 1,006 addresses are two requests (StreamChunkSize), so the
// second request's indexes are counted on from the first's 1,000.
func TestE2EStreamIndexIsThePositionInTheInput(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithTimeout(30*time.Second))
	emails := make([]string, client.StreamChunkSize+6)
	for i := range emails {
		emails[i] = fmt.Sprintf("s%04d@mailinator.com", i) // disposable: decided at once
	}
	for i, e := range map[int]string{
		0: "ann@acme.example", 1: " ann@ACME.example", 2: "ann@Acme.Example\t", 3: "zoe@acme.example",
		4: "zoe@ACME.EXAMPLE ", 999: "ann@acme.example", 1000: "ann@acme.example", 1001: "  zoe@Acme.example",
		1002: "ann@ACME.example", 1003: "temp@mailinator.com", 1004: "temp@MAILINATOR.com", 1005: "zoe@acme.example",
	} {
		emails[i] = e
	}
	// normalised is the Email the API answers for an input: trimmed, the domain lowercased.
	normalised := func(e string) string {
		local, domain, _ := strings.Cut(strings.Trim(e, " \t"), "@")
		return local + "@" + strings.ToLower(domain)
	}
	seen := make([]bool, len(emails))
	n := 0
	for r, err := range c.VerifyStream(context.Background(), emails) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if r.Index < 0 || r.Index >= len(emails) || seen[r.Index] {
			t.Fatalf("result %d (%s) has index %d: outside the input or seen already", n, r.Email, r.Index)
		}
		seen[r.Index] = true
		in := emails[r.Index]
		if want := normalised(in); r.Email != want {
			t.Errorf("index %d is %q, answered as %s, want %s", r.Index, in, r.Email, want)
		}
		want := [2]string{"invalid", "disposable"}
		if w, ok := demoWants[r.Email]; ok {
			want = w
		}
		if r.Status != want[0] || r.Reason != want[1] {
			t.Errorf("index %d (%q): %s/%s, want %v", r.Index, in, r.Status, r.Reason, want)
		}
	}
	if n != len(emails) {
		t.Errorf("%d results for %d addresses", n, len(emails))
	}
}

func TestE2EManagement(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	ctx := context.Background()
	m := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL))

	acct, err := m.Account(ctx)
	if err != nil || acct.Tier != "free" || acct.Limits.RateLimitPerMin != 100000 || acct.AccountID == "" {
		t.Fatalf("Account = %+v, %v", acct, err)
	}
	keys, err := m.ListKeys(ctx)
	if err != nil || keys.Count != 1 || keys.Max != 5 {
		t.Fatalf("ListKeys = %+v, %v", keys, err)
	}
	created, err := m.CreateKey(ctx, "ci")
	if err != nil || created.Label != "ci" || created.Key == "" || created.Warning == "" {
		t.Fatalf("CreateKey = %+v, %v", created, err)
	}
	v := client.New(created.Key, client.WithBaseURL(s.URL))
	if _, err := v.Verify(ctx, "ann@acme.example"); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	if err := m.RevokeKey(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	var e *client.Error
	if _, err := v.Verify(ctx, "ann@acme.example"); !errors.As(err, &e) || e.Status != 401 || e.Code != client.CodeInvalidAPIKey {
		t.Errorf("revoked key: %v", err)
	} else if len(e.RequestID) < 16 || !strings.Contains(e.Error(), "[request id "+e.RequestID+"]") {
		// The id a user quotes to support: the API's X-Request-Id, in the error and its text.
		t.Errorf("revoked key: request id %q in %q", e.RequestID, e.Error())
	}
	if err := m.RevokeKey(ctx, created.ID); !errors.As(err, &e) || e.Code != client.CodeKeyNotFound {
		t.Errorf("revoking twice: %v", err)
	}
	// The key's creation and revocation are in the audit log, newest first, named by the
	// provisioning key's display form, never a key.
	audit, err := m.AuditEvents(ctx, client.AuditQuery{Limit: 2})
	if err != nil || len(audit.Events) != 2 || audit.Events[0].Kind != "key_revoked" || audit.Events[1].Kind != "key_created" ||
		audit.Events[0].ActorType != "api_key" || !strings.HasPrefix(audit.Events[0].Actor, "sk_mgmt_") ||
		strings.Contains(audit.Events[1].Detail, created.Key) {
		t.Errorf("AuditEvents = %+v, %v", audit, err)
	}
	if _, err := m.AuditEvents(ctx, client.AuditQuery{Cursor: "not-issued"}); !errors.As(err, &e) || e.Code != client.CodeInvalidRequest {
		t.Errorf("bad audit cursor: %v", err)
	}
	// Each key family has its own API.
	if _, err := m.Verify(ctx, "ann@acme.example"); !errors.As(err, &e) || e.Status != 403 || e.Code != client.CodeWrongKeyType {
		t.Errorf("provisioning key on verify: %v", err)
	}
	if _, err := client.New(s.StandardKey, client.WithBaseURL(s.URL)).Account(ctx); !errors.As(err, &e) || e.Code != client.CodeWrongKeyType {
		t.Errorf("standard key on management: %v", err)
	}

	// A delivered result's usage row is written right behind its response (docs/api.md,
	// "Metering"), so the count may take a moment to show.
	var days client.DailyUsage
	wait.Until(5*time.Second, func() bool {
		days, err = m.Usage(ctx)
		return err != nil || (len(days.Days) == 30 && days.Days[29].Calls == 1)
	})
	if err != nil || len(days.Days) != 30 || days.Days[29].Calls != 1 {
		t.Errorf("Usage = %+v, %v", days, err)
	}
	sum, err := m.UsageSummary(ctx)
	if err != nil || sum.Tier != "free" || sum.CallsUsed != 1 || sum.CallsIncluded != 100000 || !sum.Period.End.After(sum.Period.Start) {
		t.Errorf("UsageSummary = %+v, %v", sum, err)
	}
	// The demo account has no Stripe customer, so there is no portal to open.
	if _, err := m.BillingPortal(ctx, "https://app.example.com/billing"); !errors.As(err, &e) || e.Status != 402 || e.Code != "no_billing_customer" {
		t.Errorf("BillingPortal: %v", err)
	}
	page, err := m.Deliveries(ctx, client.DeliveryQuery{Limit: 10})
	if err != nil || len(page.Deliveries) != 0 || page.NextCursor != "" {
		t.Errorf("Deliveries = %+v, %v", page, err)
	}
	if _, err := m.Deliveries(ctx, client.DeliveryQuery{Status: "lost"}); !errors.As(err, &e) || e.Code != client.CodeInvalidRequest {
		t.Errorf("bad status filter: %v", err)
	}
	// Replays are for paid tiers.
	if _, err := m.RetryDelivery(ctx, "6f1d2f0e-0000-4000-8000-000000000000"); !errors.As(err, &e) || e.Status != 403 || e.Code != "plan_upgrade_required" {
		t.Errorf("RetryDelivery on free: %v", err)
	}
}

// statusLog records the status of every response a client receives.
type statusLog struct {
	mu       sync.Mutex
	statuses []int
}

func (l *statusLog) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		l.mu.Lock()
		l.statuses = append(l.statuses, resp.StatusCode)
		l.mu.Unlock()
	}
	return resp, err
}

// The acceptance test: with RetryOnRateLimit, a 429 in the middle of a 500-address batch
// is retried transparently. The account may verify 450 addresses a minute, so the tenth chunk of
// 50 is refused until the next one-minute window.
func TestE2ERateLimitMidBatchIsRetried(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, map[string]string{
		"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "450",
		"MAILVET_PLAN_FREE_MONTHLY_CALLS":      "100000",
	})
	emails := make([]string, 500)
	for i := range emails {
		if i%5 == 0 {
			emails[i] = fmt.Sprintf("user%03d@globex.example", i)
		} else {
			emails[i] = fmt.Sprintf("user%03d@mailinator.com", i)
		}
	}
	// The windows are whole minutes of the server's clock (this machine's): start early enough
	// in one that the first 450 addresses cannot straddle two.
	if sec := time.Now().Second(); sec > 45 {
		time.Sleep(time.Duration(61-sec) * time.Second)
	}
	log := &statusLog{}
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithRetryOnRateLimit(true),
		client.WithHTTPClient(&http.Client{Transport: log}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	results, err := c.VerifyBatch(ctx, emails)
	if err != nil {
		t.Fatalf("VerifyBatch: %v (statuses %v)", err, log.statuses)
	}
	if len(results) != 500 {
		t.Fatalf("%d results", len(results))
	}
	for i, r := range results {
		if r.Email != emails[i] {
			t.Fatalf("result %d is for %s, want %s", i, r.Email, emails[i])
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	n429, n200 := 0, 0
	for _, st := range log.statuses {
		switch st {
		case 429:
			n429++
		case 200:
			n200++
		}
	}
	if n429 == 0 || n200 != 10 {
		t.Errorf("statuses %v: want ten 200s and at least one 429 in the middle", log.statuses)
	}
	t.Logf("500 addresses in %s, responses %v", time.Since(start).Round(time.Millisecond), log.statuses)
}

// losesFirstAnswer passes every request to the API, but replaces the API's answer to the first
// POST to path (any POST when empty), after the API acted on it, with a 503: the API's own
// envelope, or with page a proxy's HTML page. That is what a client that retries sees when a
// connection is cut, or a gateway times out, after the API verified, charged or created.
type losesFirstAnswer struct {
	path string
	page bool

	mu   sync.Mutex
	lost bool
	keys []string // the Idempotency-Key of every POST it watched
}

func (l *losesFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || l.path != "" && r.URL.Path != l.path {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, r.Header.Get("Idempotency-Key"))
	if l.lost {
		return resp, nil
	}
	l.lost = true
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	body, ct := `{"error":"service_unavailable","message":"Lost.","action":"Retry.","docs":"d"}`, "application/json"
	if l.page {
		body, ct = "<html><h1>502 upstream timed out</h1></html>", "text/html"
	}
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"1"}, "Content-Type": {ct}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

// A key creation whose answer is lost is sent again with the same Idempotency-Key, and the real
// API answers the key it created the first time instead of creating another.
func TestE2ELostAnswerIsReplayed(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	ctx := context.Background()
	rt := &losesFirstAnswer{}
	m := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL), client.WithRetryOnRateLimit(true),
		client.WithHTTPClient(&http.Client{Transport: rt}))
	created, err := m.CreateKey(ctx, "ci")
	if err != nil || created.Key == "" {
		t.Fatalf("CreateKey = %+v, %v", created, err)
	}
	if len(rt.keys) != 2 || rt.keys[0] == "" || rt.keys[0] != rt.keys[1] {
		t.Fatalf("Idempotency-Keys %q, want the same key on both attempts", rt.keys)
	}
	keys, err := m.ListKeys(ctx)
	if err != nil || keys.Count != 2 {
		t.Fatalf("ListKeys = %+v, %v: want the demo key and one created", keys, err)
	}
	for _, k := range keys.Keys {
		if k.Label == "ci" && k.ID != created.ID {
			t.Fatalf("the key listed %s is not the one answered %s", k.ID, created.ID)
		}
	}
	if _, err := client.New(created.Key, client.WithBaseURL(s.URL)).Verify(ctx, "ann@acme.example"); err != nil {
		t.Fatalf("the replayed key does not work: %v", err)
	}
}

// A batch request whose answer is lost after the real API verified and charged it is sent again
// with the same Idempotency-Key (docs/api.md, "Idempotency"): the API replays its first answer,
// and the account is charged once for the batch.
func TestE2ELostBatchAnswerIsChargedOnce(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	ctx := context.Background()
	rt := &losesFirstAnswer{path: "/v1/email/verify/batch", page: true}
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithRetryOnRateLimit(true),
		client.WithHTTPClient(&http.Client{Transport: rt}))
	m := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL))
	before, err := m.UsageSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	emails := []string{"ann@acme.example", "zoe@acme.example", "anyone@globex.example"}
	results, err := c.VerifyBatch(ctx, emails)
	if err != nil || len(results) != len(emails) {
		t.Fatalf("VerifyBatch = %d results, %v", len(results), err)
	}
	for i, r := range results {
		if r.Email != emails[i] || r.Status != demoWants[emails[i]][0] {
			t.Errorf("result %d = %s %s", i, r.Email, r.Status)
		}
	}
	if len(rt.keys) != 2 || len(rt.keys[0]) != 32 || rt.keys[1] != rt.keys[0] {
		t.Fatalf("Idempotency-Keys %q, want one key sent on both attempts", rt.keys)
	}
	after, err := m.UsageSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.CallsUsed - before.CallsUsed; got != len(emails) {
		t.Fatalf("the batch was charged %d calls, want %d: the retry was verified and charged again", got, len(emails))
	}
}

// cutsFirstAnswer passes every request to the API, but cuts the connection of the first one of
// method (its answer read and dropped, a reset returned): the API acted, the client never heard.
type cutsFirstAnswer struct {
	method string

	mu  sync.Mutex
	cut bool
	n   int // requests of method
}

func (c *cutsFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != c.method {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.cut {
		return resp, nil
	}
	c.cut = true
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// A key revocation and a list deletion whose connection is cut after the real API acted are sent
// again; the API answers the retry key_not_found and list_not_found, which the client reports as
// done (docs/clients.md, "Network failures"): the key no longer works, the list is gone.
func TestE2ELostDeleteAnswerIsDone(t *testing.T) {
	t.Parallel()
	s := demoapi.Start(t, roomy)
	ctx := context.Background()
	rt := &cutsFirstAnswer{method: http.MethodDelete}
	m := client.New(s.ProvisioningKey, client.WithBaseURL(s.URL), client.WithRetryOnRateLimit(true),
		client.WithHTTPClient(&http.Client{Transport: rt}))
	k, err := m.CreateKey(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RevokeKey(ctx, k.ID); err != nil || rt.n != 2 {
		t.Fatalf("RevokeKey after a cut answer = %v after %d DELETEs, want nil after 2", err, rt.n)
	}
	var e *client.Error
	if _, err := client.New(k.Key, client.WithBaseURL(s.URL)).Verify(ctx, "ann@acme.example"); !errors.As(err, &e) || e.Code != client.CodeInvalidAPIKey {
		t.Fatalf("the revoked key: %v, want invalid_api_key", err)
	}

	rt2 := &cutsFirstAnswer{method: http.MethodDelete}
	c := client.New(s.StandardKey, client.WithBaseURL(s.URL), client.WithRetryOnRateLimit(true),
		client.WithHTTPClient(&http.Client{Transport: rt2}))
	l, err := c.UploadList(ctx, strings.NewReader("ann@acme.example\n"), client.ListUpload{Format: client.ListText})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteList(ctx, l.ID); err != nil || rt2.n != 2 {
		t.Fatalf("DeleteList after a cut answer = %v after %d DELETEs, want nil after 2", err, rt2.n)
	}
	if _, err := c.List(ctx, l.ID); !errors.As(err, &e) || e.Code != client.CodeListNotFound {
		t.Fatalf("the deleted list: %v, want list_not_found", err)
	}
}
