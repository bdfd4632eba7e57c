package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/privacy"
	"github.com/mailvet/mailvet/internal/privacy/privacytest"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// waitJob polls GET /v1/email/jobs/{id} until the job is completed.
func (b *verifyBundle) waitJob(t *testing.T, key, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		job := b.call(http.MethodGet, "/v1/email/jobs/"+id, key, nil).want(t, 200, "").body
		if job["status"] == "completed" {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not complete: %v", id, job)
		}
	}
}

// The whole flow through the API: an account verifies through every route, exports its data,
// and deletes itself; afterwards no table holds its addresses or its id, but for the anonymous
// billing counts, and its keys are refused.
func TestAccountExportAndDeletionThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, mgmt := b.account(plan.Free, "")
	key := b.standardKey(a.ID).Raw
	pgtest.Exec(t, b.pool, `UPDATE accounts SET email = $2 WHERE id = $1`, a.ID, "owner-"+a.ID[:8]+"@owner.test")

	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, 200, "")
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"bob@acme.test"}}).want(t, 200, "")
	job := b.verify(key, map[string]string{"email": "info@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	b.waitJob(t, key, job)
	b.settle()

	// The export holds what it says.
	ex := b.call(http.MethodGet, "/v1/management/account/export", mgmt, nil).want(t, 200, "")
	if cd := ex.header.Get("Content-Disposition"); !strings.Contains(cd, "attachment") {
		t.Errorf("Content-Disposition %q", cd)
	}
	var doc struct {
		Account map[string]any   `json:"account"`
		Keys    []map[string]any `json:"keys"`
		Jobs    []map[string]any `json:"jobs"`
		Results []struct {
			Route  string         `json:"route"`
			Result map[string]any `json:"result"`
		} `json:"results"`
		Truncated []string `json:"truncated"`
	}
	mustOK(t, json.Unmarshal(ex.raw, &doc))
	emails := map[string]string{}
	for _, r := range doc.Results {
		emails[r.Route], _ = r.Result["email"].(string)
	}
	if doc.Account["account_id"] != a.ID || len(doc.Keys) != 2 || len(doc.Jobs) != 1 || doc.Jobs[0]["email"] != "info@acme.test" ||
		emails["verify"] != "ann@acme.test" || emails["verify_batch"] != "bob@acme.test" || emails["verify_async"] != "info@acme.test" ||
		len(doc.Truncated) != 0 {
		t.Errorf("export: %s", ex.raw)
	}
	for _, secret := range []string{"key_hash", "password_hash", "webhook_secret"} {
		if strings.Contains(string(ex.raw), secret) {
			t.Errorf("export carries %s", secret)
		}
	}

	// A deletion needs its confirmation: the account's id.
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{}).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": "yes"}).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/management/account", mgmt, nil).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/management/account", key, map[string]any{"confirm": a.ID}).want(t, 403, CodeWrongKeyType)
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": a.ID}).want(t, 204, "")

	b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, 401, CodeInvalidAPIKey)
	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, 401, CodeInvalidAPIKey)
	b.settle()
	for _, needle := range []string{"ann@acme.test", "bob@acme.test", "info@acme.test", "owner-" + a.ID[:8], job} {
		if hits := privacytest.Find(t, b.pool, needle); len(hits) > 0 {
			t.Errorf("%s is still stored in %v", needle, hits)
		}
		if hits := privacytest.FindInStreams(t, b.js, needle); len(hits) > 0 {
			t.Errorf("%s is still in the messages %v", needle, hits)
		}
	}
	for _, h := range privacytest.Find(t, b.pool, a.ID) {
		if h != "accounts.id" && h != "usage_monthly.account_id" && h != "usage_daily.account_id" && h != "audit_events.account_id" {
			t.Errorf("the deleted account's id is still in %s", h)
		}
	}
}

// waitConsumed waits until the consumer has been handed messages and has none left to handle.
func (b *verifyBundle) waitConsumed(t *testing.T, stream, consumer string) {
	t.Helper()
	ctx := context.Background()
	cons, err := b.js.Consumer(ctx, stream, consumer)
	mustOK(t, err)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := cons.Info(ctx)
		mustOK(t, err)
		if info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: messages not handled: %+v", consumer, info)
		}
	}
}

// A job and a list queued before their account was deleted are taken by a worker afterwards: it
// finds them gone and writes nothing back.
func TestQueuedWorkOfADeletedAccountWritesNothing(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account(plan.Free, "")
	key := b.standardKey(a.ID).Raw
	b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).want(t, http.StatusAccepted, "")
	b.call(http.MethodPost, "/v1/email/lists", key, "email,name\nbob@acme.test,Bob Listed\n", "Content-Type", "text/csv").want(t, http.StatusAccepted, "")
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": a.ID}).want(t, 204, "")

	b.startWorker(t)
	b.waitConsumed(t, queue.StreamJobs, queue.ConsumerJobRunners)
	b.waitConsumed(t, queue.StreamLists, queue.ConsumerListChunks)
	b.settle()
	for _, needle := range []string{"ann@acme.test", "bob@acme.test", "Bob Listed"} {
		if hits := privacytest.Find(t, b.pool, needle); len(hits) > 0 {
			t.Errorf("the deleted account's work wrote %s into %v", needle, hits)
		}
	}
}

func TestDeleteHistoryThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, 200, "")
	b.verify(key, map[string]string{"email": "bob@acme.test"}).want(t, 200, "")
	job := b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	b.waitJob(t, key, job)
	b.settle()
	// The job's callback must have finished before its data can go: wait for the webhook worker's
	// part here by marking it delivered, as it would.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'delivered', finished_at = now() WHERE job_id = $1`, job)

	b.call(http.MethodDelete, "/v1/email/history", key, nil).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/email/history?email=nobody", key, nil).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test&x=1", key, nil).want(t, 400, CodeInvalidRequest)
	b.call(http.MethodDelete, "/v1/email/history?email="+strings.Repeat("a", 250)+"@acme.test", key, nil).want(t, 400, CodeInvalidRequest)

	r := b.call(http.MethodDelete, "/v1/email/history?email=Ann@ACME.test", key, nil).want(t, 200, "")
	d, _ := r.body["deleted"].(map[string]any)
	if r.body["email"] != "ann@acme.test" || d["results"] != float64(2) || d["jobs"] != float64(1) || d["deliveries"] != float64(1) || d["list_rows"] != float64(0) {
		t.Errorf("history deletion: %s", r.raw)
	}
	if hits := privacytest.Find(t, b.pool, "ann@acme.test"); len(hits) > 0 {
		t.Errorf("ann@acme.test is still stored in %v", hits)
	}
	// The deletion is in the audit log by the standard key, with its counts and never the address
	// (privacytest.Find above looked in audit_events too); asking again finds nothing to delete
	// and writes nothing.
	b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test", key, nil).want(t, 200, "")
	var deletions []map[string]any
	for _, e := range b.auditEvents(b.provisioningKey(acct), "50") {
		if e["kind"] == "history_deleted" {
			deletions = append(deletions, e)
		}
	}
	if len(deletions) != 1 || deletions[0]["actor_type"] != "api_key" || deletions[0]["actor"] != auth.Mask(key) ||
		deletions[0]["detail"] != "stored results of one address deleted (results 2, jobs 1, deliveries 1, list rows 0, kept responses 0)" {
		t.Errorf("history_deleted events: %v, want one by %s with the counts", deletions, auth.Mask(key))
	}
	if n := b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND snapshot->>'email' = 'bob@acme.test'`, acct); n != 1 {
		t.Errorf("bob's result: %d rows; want it kept", n)
	}
	if n := b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND email_domain = 'acme.test'`, acct); n != 3 {
		t.Errorf("usage rows: %d; want all 3 kept for billing", n)
	}
	// The job answers that its data expired.
	j := b.call(http.MethodGet, "/v1/email/jobs/"+job, key, nil).want(t, 200, "").body
	if j["status"] != "completed" || j["email"] != nil || j["result"] != nil || j["expired_at"] == nil {
		t.Errorf("expired job: %v", j)
	}
}

// Retention expires a finished job: GET says so with expired_at, keeping its state and times.
func TestJobExpiresAfterItsRetention(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, key := b.customer(plan.Free)
	job := b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	before := b.waitJob(t, key, job)
	if before["expired_at"] != nil || before["email"] != "ann@acme.test" {
		t.Fatalf("fresh job: %v", before)
	}
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'failed', finished_at = now() WHERE job_id = $1`, job)
	p, err := privacy.Purge(context.Background(), b.pool, time.Now().Add(31*24*time.Hour), privacy.Defaults(), 100, 10)
	mustOK(t, err)
	if p.Jobs != 1 || p.Snapshots != 1 {
		t.Errorf("purge: %+v", p)
	}
	j := b.call(http.MethodGet, "/v1/email/jobs/"+job, key, nil).want(t, 200, "").body
	if j["status"] != "completed" || j["email"] != nil || j["result"] != nil || j["expired_at"] == nil ||
		j["created_at"] != before["created_at"] || j["completed_at"] != before["completed_at"] {
		t.Errorf("expired job: %v", j)
	}
}

// An account paying for a subscription is refused (409 subscription_active) and keeps working.
func TestDeleteAccountOfAPayingAccountIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a, mgmt := b.account(plan.Builder, "cus_paying")
	pgtest.Exec(t, b.pool, `UPDATE accounts SET subscription_status = 'active' WHERE id = $1`, a.ID)
	r := b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": a.ID}).want(t, http.StatusConflict, CodeSubscriptionActive)
	if !strings.Contains(r.body["action"].(string), "billing portal") {
		t.Errorf("action: %v", r.body["action"])
	}
	b.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, 200, "")
	b.call(http.MethodGet, "/v1/management/account/export", mgmt, nil).want(t, 200, "")
}

// An account deleted while its requests and jobs are running: whatever they were doing, once the
// workers are done and the retention loop's sweep has run, nothing of the account is left but
// its anonymous billing counts.
func TestDeletionDuringWorkLeavesNothingAfterTheSweep(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{
		"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "100000", "MAILVET_PLAN_FREE_MONTHLY_CALLS": "100000",
	}})
	a, mgmt := b.account(plan.Free, "")
	key := b.standardKey(a.ID).Raw
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		sent := 0
		defer func() { done <- sent }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var r reply
			if i%2 == 0 {
				r = callHandler(t, b.srv.Handler(), http.MethodPost, "/v1/email/verify", key,
					map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"})
			} else {
				r = callHandler(t, b.srv.Handler(), http.MethodPost, "/v1/email/verify/batch", key,
					map[string]any{"emails": []string{"bob@acme.test", "info@acme.test"}})
			}
			if r.status == http.StatusUnauthorized {
				return // the key is gone with the account
			}
			if r.status >= 500 {
				t.Errorf("a request racing the deletion got %d: %s", r.status, r.raw)
			}
			sent++
		}
	}()
	time.Sleep(300 * time.Millisecond)
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": a.ID}).want(t, 204, "")
	time.Sleep(100 * time.Millisecond)
	close(stop)
	if sent := <-done; sent == 0 {
		t.Fatal("no request ran before the deletion")
	}
	b.waitConsumed(t, queue.StreamJobs, queue.ConsumerJobRunners)
	b.settle()
	_, err := privacy.SweepDeleted(context.Background(), b.pool, time.Now())
	mustOK(t, err)
	for _, needle := range []string{"ann@acme.test", "bob@acme.test", "info@acme.test"} {
		if hits := privacytest.Find(t, b.pool, needle); len(hits) > 0 {
			t.Errorf("%s is still stored in %v", needle, hits)
		}
		if hits := privacytest.FindInStreams(t, b.js, needle); len(hits) > 0 {
			t.Errorf("%s is still in the messages %v", needle, hits)
		}
	}
	for _, h := range privacytest.Find(t, b.pool, a.ID) {
		if h != "accounts.id" && h != "usage_monthly.account_id" && h != "usage_daily.account_id" && h != "audit_events.account_id" {
			t.Errorf("the deleted account's id is still in %s", h)
		}
	}
}

// A request whose account is deleted while it runs — its key good when it was checked, gone when
// the request writes its job — is told its key is no longer valid (401 invalid_api_key), not
// given a 500, and is charged nothing. A trigger plays the deletion at that very moment: it
// deletes the key just before the job's (or the list's) row is inserted, as the deletion's last
// step does.
func TestRequestRacingItsAccountsDeletionIsRefusedAsRevoked(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	a, _ := b.account(plan.Free, "")
	key := b.standardKey(a.ID).Raw
	pgtest.Exec(t, b.pool, `CREATE FUNCTION delete_key_first() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM api_keys WHERE id = NEW.key_id; RETURN NEW; END $$`)
	for _, table := range []string{"jobs", "lists"} {
		pgtest.Exec(t, b.pool, `CREATE TRIGGER delete_key_first BEFORE INSERT ON `+table+` FOR EACH ROW EXECUTE FUNCTION delete_key_first()`)
	}

	b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).
		want(t, http.StatusUnauthorized, CodeInvalidAPIKey)
	key = b.standardKey(a.ID).Raw // the trigger deleted the first
	b.upload(key, "text/csv", "", "email\nann@acme.test\n").want(t, http.StatusUnauthorized, CodeInvalidAPIKey)
	if c := b.usage(a.ID); c != (usagetest.Counts{}) {
		t.Errorf("the refused request left usage %+v", c)
	}
	var stored int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobs WHERE account_id = $1) +
		(SELECT count(*) FROM lists WHERE account_id = $1)`, a.ID).Scan(&stored))
	if stored != 0 {
		t.Errorf("%d jobs or lists stored", stored)
	}
}

// A HEAD of the export answers its status and headers without building the document: it reads
// none of the account's data (a table the export reads, locked by another transaction, does not
// hold it up) and writes no account_exported event, since nothing was exported.
func TestAccountExportHeadBuildsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Builder, "")
	ctx := context.Background()
	lock, err := b.pool.Begin(ctx)
	mustOK(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, `LOCK TABLE usage_log IN ACCESS EXCLUSIVE MODE`)
	mustOK(t, err)

	ts := httptest.NewServer(b.srv.Handler())
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest(http.MethodHead, ts.URL+"/v1/management/account/export", nil)
	req.Header.Set("Authorization", "Bearer "+mgmt)
	client := ts.Client()
	client.Timeout = 3 * time.Second
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("HEAD of the export while usage_log is locked: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="mailvet-export.json"` {
		t.Errorf("HEAD of the export: %d %v", resp.StatusCode, resp.Header)
	}
	mustOK(t, lock.Rollback(ctx))
	if events := b.auditEvents(mgmt, "50"); len(events) != 0 {
		t.Errorf("events after a HEAD of the export: %v, want none", events)
	}
}

// A response kept for an Idempotency-Key replay holds the results it answered, addresses
// included, sealed for 24 hours. DELETE /v1/email/history deletes the account's kept responses
// that name the address (a single verify, a batch holding it among others), so that no replay
// serves its result afterwards; the others stay (docs/personal-data.md, "One address's results").
func TestDeleteHistoryReachesIdempotentAnswers(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Free)
	idem := func(path string, body any, k string) reply {
		return b.call(http.MethodPost, path, key, body, idempotency.Header, k)
	}
	idem("/v1/email/verify", map[string]string{"email": "ann@acme.test"}, "k-ann").want(t, 200, "")
	idem("/v1/email/verify/batch", map[string]any{"emails": []string{"carol@acme.test", "ANN@acme.test"}}, "k-batch").want(t, 200, "")
	idem("/v1/email/verify", map[string]string{"email": "bob@acme.test"}, "k-bob").want(t, 200, "")
	b.settle()
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE account_id = $1 AND status IS NOT NULL`, acct); n != 3 {
		t.Fatalf("%d kept responses; want 3", n)
	}

	b.call(http.MethodDelete, "/v1/email/history?email=ann@acme.test", key, nil).want(t, 200, "")
	if n := b.count(`SELECT count(*) FROM idempotency_keys WHERE account_id = $1`, acct); n != 1 {
		t.Errorf("%d kept responses after the history deletion; want only bob's", n)
	}
	// Nor does any stream hold the address: the batch's items were acknowledged, and the
	// durable streams carry ids only (docs/personal-data.md, "Where it is stored"). A canary
	// stream shows that the search reads what a stream stores.
	canary := jetstream.StreamConfig{Name: "PRIVACY_CANARY", Subjects: []string{"privacy.canary"}, Storage: jetstream.MemoryStorage}
	if _, err := b.js.CreateStream(context.Background(), canary); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(context.Background(), "privacy.canary", []byte(`{"email":"canary@acme.test"}`)); err != nil {
		t.Fatal(err)
	}
	if hits := privacytest.FindInStreams(t, b.js, "canary@acme.test"); len(hits) != 1 {
		t.Errorf("the canary message found as %v; want once", hits)
	}
	if hits := privacytest.FindInStreams(t, b.js, "ann@acme.test"); len(hits) > 0 {
		t.Errorf("after the history deletion ann@acme.test is still in the messages %v", hits)
	}
	// The retry of ann's request runs again instead of replaying her deleted result; bob's
	// request still replays.
	if r := idem("/v1/email/verify", map[string]string{"email": "ann@acme.test"}, "k-ann").want(t, 200, ""); r.header.Get(idempotency.ReplayedHeader) != "" {
		t.Errorf("ann's request replayed a response kept after her history was deleted: %s", r.raw)
	}
	if r := idem("/v1/email/verify", map[string]string{"email": "bob@acme.test"}, "k-bob").want(t, 200, ""); r.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("bob's request did not replay: %v", r.header)
	}
}
