package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
)

func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "")

	list := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "")
	if list.body["count"] != float64(0) || list.body["max"] != float64(2) || len(list.body["keys"].([]any)) != 0 {
		t.Fatalf("empty list: %s", list.raw)
	}

	created := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "production"}).want(t, 201, "")
	raw := created.body["key"].(string)
	if kind, ok := auth.KindOf(raw); !ok || kind != auth.KindStandard {
		t.Fatalf("created key %q is not a standard key", raw)
	}
	if created.body["warning"] == "" || created.body["label"] != "production" {
		t.Errorf("creation response: %s", created.raw)
	}
	isoUTC(t, created.body["created_at"])
	prefix := created.body["prefix"].(string)
	if prefix != auth.Mask(raw) || strings.Contains(prefix, raw[8:20]) {
		t.Errorf("prefix %q must be the masked form", prefix)
	}
	// Only the hash is stored.
	var stored []byte
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT key_hash FROM api_keys WHERE id = $1`, created.body["id"]).Scan(&stored))
	if string(stored) != string(auth.Hash(raw)) {
		t.Error("key_hash is not the SHA-256 of the key")
	}

	list = b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "")
	keys := list.body["keys"].([]any)
	if list.body["count"] != float64(1) || len(keys) != 1 {
		t.Fatalf("list after create: %s", list.raw)
	}
	k := keys[0].(map[string]any)
	if k["id"] != created.body["id"] || k["prefix"] != prefix || k["key"] != nil {
		t.Errorf("listed key %v", k)
	}
	if strings.Contains(string(list.raw), raw) {
		t.Fatal("listing leaks the raw key")
	}
	// The new key works on the verify family.
	b.call(http.MethodGet, "/v1/email/anything", raw, nil).want(t, 404, CodeNotFound)

	b.call(http.MethodDelete, "/v1/management/keys/"+k["id"].(string), mgmt, nil).want(t, 204, "")
	b.call(http.MethodGet, "/v1/email/anything", raw, nil).want(t, 401, CodeInvalidAPIKey)
	list = b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "")
	if list.body["count"] != float64(0) {
		t.Errorf("revoked keys must not be listed: %s", list.raw)
	}
	// Revoking again is a 404: the key is no longer active.
	b.call(http.MethodDelete, "/v1/management/keys/"+k["id"].(string), mgmt, nil).want(t, 404, CodeKeyNotFound)
}

func TestDeleteKeyNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	mine, mgmt := b.account(plan.Free, "")
	other, _ := b.account(plan.Free, "")
	othersKey := b.standardKey(other.ID)
	var provisioningID string
	mustOK(t, b.pool.QueryRow(context.Background(),
		`SELECT id FROM api_keys WHERE account_id = $1 AND kind = 'provisioning'`, mine.ID).Scan(&provisioningID))

	for name, id := range map[string]string{
		"another account's key": othersKey.ID,
		"own provisioning key":  provisioningID,
		"malformed id":          "not-a-uuid",
		"unknown id":            "7a0c6a4e-3b7e-4b0e-9f38-5d0b8f1a2c3d",
	} {
		t.Run(name, func(t *testing.T) {
			b.call(http.MethodDelete, "/v1/management/keys/"+id, mgmt, nil).want(t, 404, CodeKeyNotFound)
		})
	}
	// Nothing was revoked by any of them.
	b.call(http.MethodGet, "/v1/email/x", othersKey.Raw, nil).want(t, 404, CodeNotFound)
	b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "")
}

func TestKeyLimitReached(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"MAILVET_PLAN_FREE_MAX_KEYS": "3"})
	acct, mgmt := b.account(plan.Free, "")
	for range 3 {
		b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "k"}).want(t, 201, "")
	}
	r := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "one too many"}).want(t, 429, CodeKeyLimitReached)
	if !strings.Contains(r.body["message"].(string), "3 of 3") {
		t.Errorf("message %q should state the numbers", r.body["message"])
	}
	if got := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).body; got["count"] != float64(3) || got["max"] != float64(3) {
		t.Errorf("list: %v", got)
	}
	// The provisioning key does not count toward the standard-key maximum, and a revoked key
	// frees its place.
	keys, _ := b.store.ListStandardKeys(context.Background(), acct.ID)
	b.call(http.MethodDelete, "/v1/management/keys/"+keys[0].ID, mgmt, nil).want(t, 204, "")
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "again"}).want(t, 201, "")
}

// Two concurrent creates at max−1: exactly one wins. Repeated to give a race a chance to show.
func TestKeyLimitIsRaceSafe(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // free: 2 keys
	for round := range 5 {
		acct, mgmt := b.account(plan.Free, "")
		b.standardKey(acct.ID)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		for i := range 2 {
			wg.Go(func() {
				statuses[i] = b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "race"}).status
			})
		}
		wg.Wait()
		if !(statuses[0] == 201 && statuses[1] == 429 || statuses[0] == 429 && statuses[1] == 201) {
			t.Fatalf("round %d: statuses %v, want one 201 and one 429", round, statuses)
		}
		if keys, _ := b.store.ListStandardKeys(context.Background(), acct.ID); len(keys) != 2 {
			t.Fatalf("round %d: %d active keys, max is 2", round, len(keys))
		}
	}
}

func TestCreateKeyBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acct, mgmt := b.account(plan.Free, "")
	tests := []struct {
		name    string
		body    any
		headers []string
		field   string // the message must name it
	}{
		{"no body", nil, nil, "Content-Type"},
		{"empty body", "", nil, "empty"},
		{"malformed JSON", `{"label": `, nil, "JSON"},
		{"not an object", `["a"]`, nil, "object"},
		{"label wrong type", `{"label": 5}`, nil, "label"},
		{"label null", `{"label": null}`, nil, "label"},
		{"label missing", `{}`, nil, "label"},
		{"unknown field", `{"label": "x", "lable": "y"}`, nil, "lable"},
		{"two objects", `{"label": "x"} {"label": "y"}`, nil, "one JSON object"},
		{"empty label", `{"label": ""}`, nil, "label"},
		{"blank label", `{"label": "   "}`, nil, "label"},
		{"label of 101 characters", map[string]string{"label": strings.Repeat("é", 101)}, nil, "label"},
		{"control character", `{"label": "a\u0007b"}`, nil, "label"},
		{"text/plain", `{"label": "x"}`, []string{"Content-Type", "text/plain"}, "Content-Type"},
		{"form", `label=x`, []string{"Content-Type", "application/x-www-form-urlencoded"}, "Content-Type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.call(http.MethodPost, "/v1/management/keys", mgmt, tt.body, tt.headers...).want(t, 400, CodeInvalidRequest)
			if msg := r.body["message"].(string); !strings.Contains(msg, tt.field) {
				t.Errorf("message %q does not name %q", msg, tt.field)
			}
		})
	}
	// None of them created a key; a 100-character label is fine.
	if keys, _ := b.store.ListStandardKeys(context.Background(), acct.ID); len(keys) != 0 {
		t.Fatalf("a failed request created %d keys", len(keys))
	}
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": strings.Repeat("é", 100)}).want(t, 201, "")
}

func TestEchoErrorsUnderManagementUseTheEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "")
	r := b.call(http.MethodPut, "/v1/management/keys", mgmt, map[string]string{"label": "x"}).want(t, 405, CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "GET, HEAD, POST" {
		t.Errorf("Allow = %q, want GET, HEAD, POST", allow)
	}
	// Even a 405 authenticates first.
	b.call(http.MethodPut, "/v1/management/keys", "", map[string]string{"label": "x"}).want(t, 401, CodeMissingAPIKey)
	// The 2 MB body guard answers 413 before reading the body.
	big := `{"label": "` + strings.Repeat("a", MaxBodyBytes) + `"}`
	b.call(http.MethodPost, "/v1/management/keys", mgmt, big).want(t, 413, CodePayloadTooLarge)
}

// An optional field sent as null is read as absent, as on every route (verify's webhook_url,
// callback_url and webhook_secret): "mode": null creates a live key, like no mode, and
// /openapi.json says so, so a client validating its request against it may send it
// (docs/api.md, "POST /v1/management/keys"). A required field sent null is missing
// (TestCreateKeyBadInput, "label null").
func TestCreateKeyModeNullIsLive(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, mgmt := b.account(plan.Free, "")
	doc, _ := loadSpec(t)
	schema := doc.Paths.Find("/v1/management/keys").Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	for body, valid := range map[string]bool{
		`{"label": "ci", "mode": null}`:      true,
		`{"label": "ci", "mode": "sandbox"}`: true,
		`{"label": "ci", "mode": "test"}`:    false,
	} {
		var v any
		mustOK(t, json.Unmarshal([]byte(body), &v))
		if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); (err == nil) != valid {
			t.Errorf("openapi: request %s: valid %v, want %v (%v)", body, err == nil, valid, err)
		}
	}
	r := b.call(http.MethodPost, "/v1/management/keys", mgmt, `{"label": "ci", "mode": null}`).want(t, http.StatusCreated, "")
	if r.body["mode"] != "live" || !strings.HasPrefix(r.body["key"].(string), "sk_live_") {
		t.Errorf(`"mode": null made %v`, r.body)
	}
}

// Revoking a key stops new requests with it, not the work it started: a job queued with it
// still runs, is read with another key of the account, and its callback is sent
// (docs/api.md, "DELETE /v1/management/keys/{id}").
func TestRevokedKeysQueuedJobStillCompletes(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	a, mgmt := b.account("free", "")
	old := b.standardKey(a.ID)
	job := b.verify(old.Raw, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	// The rotation: a new key first, then the old one revoked; the new one works throughout.
	fresh := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "rotated"}).want(t, http.StatusCreated, "").body["key"].(string)
	b.call(http.MethodDelete, "/v1/management/keys/"+old.ID, mgmt, nil).want(t, http.StatusNoContent, "")
	b.call(http.MethodGet, "/v1/email/jobs/"+job, old.Raw, nil).want(t, http.StatusUnauthorized, CodeInvalidAPIKey)

	b.startWorker(t)
	if j := b.waitJob(t, fresh, job); j["email"] != "ann@acme.test" || j["result"] == nil {
		t.Errorf("the revoked key's job: %v", j)
	}
	if n := b.count(`SELECT count(*) FROM deliveries WHERE job_id = $1 AND state = 'pending'`, job); n != 1 {
		t.Errorf("the revoked key's job has %d callbacks to send; want 1", n)
	}
}
