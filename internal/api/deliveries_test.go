package api

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// A replay whose publish fails after its commit (the API's NATS connection is cut) is stored, and
// the webhook workers' outbox sweep sends it: the retry route answers 202 with the replay, as when
// the publish worked, instead of 500 datastore_error. A repeated request gets the same replay.
func TestRetryDeliveryStoredButNotPublished(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, proxyNATS: true})
	acct, key := b.account(plan.Builder, "")
	job, failed := newUUID(), newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@acme.test', 'https://hooks.example.com/x', 'completed')`, job, acct.ID)
	pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts) VALUES ($1, $2, $3, 'https://hooks.example.com/x', '{}', 'failed', 3)`,
		failed, job, acct.ID)

	b.natsProxy.Cut()
	t.Cleanup(b.natsProxy.Restore)
	first := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", key, nil).want(t, http.StatusAccepted, "").body
	replay, _ := first["delivery_id"].(string)
	if first["replay_of"] != failed || first["status"] != "pending" || replay == "" {
		t.Fatalf("retry answered %v", first)
	}
	var state, replayOf string
	if err := b.pool.QueryRow(context.Background(), `SELECT state, replay_of::text FROM deliveries WHERE id = $1`, replay).Scan(&state, &replayOf); err != nil {
		t.Fatalf("replay %s not stored: %v", replay, err)
	}
	if state != "pending" || replayOf != failed {
		t.Errorf("replay stored as %s of %s, want pending of %s", state, replayOf, failed)
	}
	again := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", key, nil).want(t, http.StatusAccepted, "").body
	if again["delivery_id"] != replay {
		t.Errorf("a second retry answered %v, want the replay %s again", again, replay)
	}

	// The publishes really failed: nothing reached the stream, the sweep is what will send it.
	nc, err := nats.Connect(b.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), queue.StreamWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	if n := stream.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("WEBHOOKS holds %d messages; the publish was to fail", n)
	}
}

// A repeated retry of a delivery whose replay has since been delivered answers with that replay
// as it is, delivered, not as pending.
func TestRetryDeliveryAgainShowsTheReplayState(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.account(plan.Builder, "")
	job, failed := newUUID(), newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@acme.test', 'https://hooks.example.com/x', 'completed')`, job, acct.ID)
	pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts) VALUES ($1, $2, $3, 'https://hooks.example.com/x', '{}', 'failed', 3)`,
		failed, job, acct.ID)
	first := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", key, nil).want(t, http.StatusAccepted, "").body
	if first["status"] != "pending" {
		t.Fatalf("a new replay: %v", first)
	}
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'delivered', finished_at = now() WHERE id = $1`, first["delivery_id"])
	again := b.call(http.MethodPost, "/v1/management/deliveries/"+failed+"/retry", key, nil).want(t, http.StatusAccepted, "").body
	if again["delivery_id"] != first["delivery_id"] || again["status"] != "delivered" {
		t.Errorf("a repeated retry after the replay was delivered: %v", again)
	}
}

// A bulk list past its expires_at is gone on every route (docs/lists.md, "States"), and so is
// the delivery of its callback, before a sweep has purged either: the delivery log, the
// dashboard's Deliveries page and both replays leave it out (404 delivery_not_found, and a replay
// of it made earlier with it), while the deliveries of a live list and of a job stay.
func TestDeliveriesOfAnExpiredListAreGone(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true}) // no sweep: the rows stay in the database
	d, acct := newDashboardClient(t, b, "ann@example.com")
	pgtest.Exec(t, b.pool, `UPDATE accounts SET tier = 'builder' WHERE id = $1`, acct)
	mgmt, key := b.provisioningKey(acct), b.standardKey(acct).Raw
	gone := b.upload(key, "text/plain", "", "ann@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	kept := b.upload(key, "text/plain", "", "bob@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	job := newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@acme.test', 'https://hooks.example.com/x', 'completed')`, job, acct)
	ofGone, replayOfGone, ofKept, ofJob := newUUID(), newUUID(), newUUID(), newUUID()
	for _, r := range []struct{ id, column, subject, state, replayOf string }{
		{ofGone, "list_id", gone, "failed", ""},
		{replayOfGone, "list_id", gone, "failed", ofGone},
		{ofKept, "list_id", kept, "failed", ""},
		{ofJob, "job_id", job, "failed", ""},
	} {
		pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, `+r.column+`, account_id, url, body, state, attempts, replay_of)
			VALUES ($1, $2, $3, 'https://hooks.example.com/x', '{}', $4, 3, NULLIF($5, '')::uuid)`, r.id, r.subject, acct, r.state, r.replayOf)
	}
	pgtest.Exec(t, b.pool, `UPDATE lists SET expires_at = now() - interval '1 second' WHERE id = $1`, gone)

	page := b.call(http.MethodGet, "/v1/management/deliveries", mgmt, nil).want(t, http.StatusOK, "").body
	var listed []string
	for _, x := range page["deliveries"].([]any) {
		listed = append(listed, x.(map[string]any)["id"].(string))
	}
	slices.Sort(listed)
	if want := slices.Sorted(slices.Values([]string{ofKept, ofJob})); !slices.Equal(listed, want) {
		t.Errorf("delivery log: %v, want %v (the expired list's left out)", listed, want)
	}
	for _, id := range []string{ofGone, replayOfGone} {
		b.call(http.MethodPost, "/v1/management/deliveries/"+id+"/retry", mgmt, nil).want(t, http.StatusNotFound, CodeDeliveryNotFound)
	}
	b.call(http.MethodPost, "/v1/management/deliveries/"+ofKept+"/retry", mgmt, nil).want(t, http.StatusAccepted, "")

	req, _ := http.NewRequest(http.MethodGet, d.base+"/dashboard/deliveries", nil)
	resp, body := d.do(req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, ofJob) || strings.Contains(body, ofGone) || strings.Contains(body, replayOfGone) {
		t.Errorf("Deliveries page: %d, want %s and not %s nor %s:\n%s", resp.StatusCode, ofJob, ofGone, replayOfGone, body)
	}
	// Each delivery names what it announces: the job, or the list with a link to its page.
	if !strings.Contains(body, `List <a href="/dashboard/lists/`+kept+`"><code>`+kept+`</code></a>`) || !strings.Contains(body, "Job <code>"+job+"</code>") {
		t.Errorf("Deliveries page: want the list's delivery to name list %s and the job's job %s:\n%s", kept, job, body)
	}
	resp, body = d.post("/dashboard/deliveries/"+ofGone+"/retry", url.Values{"csrf": {d.csrf("/dashboard/deliveries")}})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "There is no such delivery") {
		t.Errorf("dashboard retry of the expired list's delivery: %d\n%.400s", resp.StatusCode, body)
	}
	if n := b.count(`SELECT count(*) FROM deliveries WHERE replay_of IN ($1, $2)`, ofGone, replayOfGone); n != 1 {
		t.Errorf("%d replays of the expired list's deliveries, want the one stored before it expired", n)
	}
}

// A replay sends the account's data to a URL again: each one made, with the management API or
// on the dashboard, writes delivery_replayed naming who asked, the delivery and the URL, so that
// a replay made with a stolen provisioning key shows in the audit log. A repeated request that
// gets the replay already made sends nothing new and writes nothing.
func TestDeliveryReplaysAreAudited(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	d, acct := newDashboardClient(t, b, "ann@example.com")
	pgtest.Exec(t, b.pool, `UPDATE accounts SET tier = 'builder' WHERE id = $1`, acct)
	mgmt := b.provisioningKey(acct)
	job, viaAPI, viaDashboard := newUUID(), newUUID(), newUUID()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@acme.test', 'https://hooks.example.com/x', 'completed')`, job, acct)
	for _, id := range []string{viaAPI, viaDashboard} {
		pgtest.Exec(t, b.pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts) VALUES ($1, $2, $3, 'https://hooks.example.com/x', '{}', 'failed', 3)`,
			id, job, acct)
	}
	for range 2 {
		b.call(http.MethodPost, "/v1/management/deliveries/"+viaAPI+"/retry", mgmt, nil).want(t, http.StatusAccepted, "")
	}
	resp, body := d.post("/dashboard/deliveries/"+viaDashboard+"/retry", url.Values{"csrf": {d.csrf("/dashboard/deliveries")}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("dashboard retry: %d\n%.400s", resp.StatusCode, body)
	}

	var replays []map[string]any
	for _, e := range b.auditEvents(mgmt, "50") {
		if e["kind"] == "delivery_replayed" {
			replays = append(replays, e)
		}
	}
	if len(replays) != 2 {
		t.Fatalf("%d delivery_replayed events, want one per replay made: %v", len(replays), replays)
	}
	byDashboard, byKey := replays[0], replays[1]
	if byKey["actor_type"] != "api_key" || byKey["actor"] != auth.Mask(mgmt) || byKey["outcome"] != "success" || byKey["client_ip"] != "192.0.2.1" ||
		byKey["detail"] != "delivery "+viaAPI+" replayed to https://hooks.example.com" {
		t.Errorf("the API's replay: %v", byKey)
	}
	if byDashboard["actor_type"] != "dashboard_user" || byDashboard["actor"] != "ann@example.com" ||
		byDashboard["detail"] != "delivery "+viaDashboard+" replayed to https://hooks.example.com" {
		t.Errorf("the dashboard's replay: %v", byDashboard)
	}
}
