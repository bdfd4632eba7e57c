package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
