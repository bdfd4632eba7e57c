package api

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// An async verify sent again with its Idempotency-Key answers the first job, which runs and is
// billed once; another body with the key is refused; concurrent duplicates create one job.
func TestIdempotentAsyncVerify(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	body := map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}
	verify := func(body any, idem string) reply {
		return b.call(http.MethodPost, "/v1/email/verify", key, body, idempotency.Header, idem)
	}
	first := verify(body, "order-1").want(t, http.StatusAccepted, "")
	again := verify(body, "order-1").want(t, http.StatusAccepted, "")
	jobID, _ := first.body["job_id"].(string)
	if jobID == "" || again.body["job_id"] != jobID || again.header.Get(idempotency.ReplayedHeader) != "true" ||
		first.header.Get(idempotency.ReplayedHeader) != "" {
		t.Fatalf("first %v, replay %v %v", first.body, again.body, again.header)
	}
	r := verify(map[string]string{"email": "bob@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}, "order-1").
		want(t, http.StatusConflict, "idempotency_key_reused")
	if !strings.Contains(r.body["message"].(string), "Idempotency-Key") {
		t.Errorf("message %v", r.body["message"])
	}

	// Two at once with a new key: one job, both answers name it.
	answers := make([]string, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := callHandler(t, b.srv.Handler(), http.MethodPost, "/v1/email/verify", key,
				map[string]string{"email": "info@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}, idempotency.Header, "order-2")
			if rep.status != http.StatusAccepted {
				t.Errorf("concurrent: %d %s", rep.status, rep.raw)
			}
			answers[i], _ = rep.body["job_id"].(string)
		}()
	}
	wg.Wait()
	if answers[0] == "" || answers[0] != answers[1] || answers[0] == jobID {
		t.Fatalf("concurrent job ids %q (first %s)", answers, jobID)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 2 {
		t.Fatalf("jobs %d, want 2", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.count(`SELECT count(*) FROM jobs WHERE account_id = $1 AND state = 'completed'`, acct) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("jobs did not complete")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range []string{jobID, answers[0]} {
		if n := b.rows(acct, func(r usagetest.Row) bool { return r.ItemKey == "job:"+id && r.Billable }); n != 1 {
			t.Errorf("job %s: %d billable rows", id, n)
		}
	}
	if c := usagetest.Of(t, b.pool, acct); c.Billable != 2 {
		t.Errorf("billed %d, want 2", c.Billable)
	}
}

// A list upload sent again with its key answers the first list, stored and admitted once; the
// file is hashed as it is spooled, so another file with the key is refused.
func TestIdempotentListUpload(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Builder)
	file := "ann@acme.test\nbob@acme.test\n"
	upload := func(file, query, idem string) reply {
		return b.call(http.MethodPost, "/v1/email/lists"+query, key, file, "Content-Type", "text/plain", idempotency.Header, idem)
	}
	first := upload(file, "?name=a", "list-1").want(t, http.StatusAccepted, "")
	again := upload(file, "?name=a", "list-1").want(t, http.StatusAccepted, "")
	if first.body["id"] == nil || again.body["id"] != first.body["id"] ||
		again.header.Get("Location") != first.header.Get("Location") || again.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("first %v, replay %v %v", first.body, again.body, again.header)
	}
	upload(file+"info@acme.test\n", "?name=a", "list-1").want(t, http.StatusConflict, "idempotency_key_reused")
	upload(file, "?name=b", "list-1").want(t, http.StatusConflict, "idempotency_key_reused")
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("lists %d, want 1", n)
	}
	if c := usagetest.Of(t, b.pool, acct); c.Held != 2 {
		t.Fatalf("held %d, want the 2 addresses of one list", c.Held)
	}
	// A refused upload gives its key back: the same key then runs.
	upload("", "", "list-2").want(t, http.StatusBadRequest, "invalid_request")
	upload(file, "", "list-2").want(t, http.StatusAccepted, "")
}

// Key creation is replayed with the same key for 24 hours (the API's clock); after that the
// Idempotency-Key is free and creates another.
func TestIdempotentKeyCreationExpires(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	b := setup(t, nil, func(d *Deps) {
		d.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	_, mgmt := b.account(plan.Builder, "")
	create := func(label, idem string) reply {
		return b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": label}, idempotency.Header, idem)
	}
	first := create("ci", "key-1").want(t, http.StatusCreated, "")
	again := create("ci", "key-1").want(t, http.StatusCreated, "")
	if again.body["id"] != first.body["id"] || again.body["key"] != first.body["key"] {
		t.Fatalf("first %v, replay %v", first.body, again.body)
	}
	create("other", "key-1").want(t, http.StatusConflict, "idempotency_key_reused")
	b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci"}, idempotency.Header, "has space").
		want(t, http.StatusBadRequest, "invalid_request")

	mu.Lock()
	now = now.Add(idempotency.Lifetime)
	mu.Unlock()
	later := create("ci", "key-1").want(t, http.StatusCreated, "")
	if later.body["id"] == first.body["id"] || later.header.Get(idempotency.ReplayedHeader) != "" {
		t.Fatalf("after 24 h the key replayed %v", later.body)
	}
	keys := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, http.StatusOK, "")
	if got := len(keys.body["keys"].([]any)); got != 2 {
		t.Fatalf("keys %d, want 2: %s", got, keys.raw)
	}
}

// A batch sent again with its Idempotency-Key gets the first answer back and is billed once;
// another batch with the key is refused: a client's retry after a cut connection is verified and
// billed once.
func TestIdempotentBatch(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	batch := func(emails []string, idem string) reply {
		var headers []string
		if idem != "" {
			headers = []string{idempotency.Header, idem}
		}
		return b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": emails}, headers...)
	}
	emails := []string{"ann@acme.test", "zoe@acme.test"}
	first := batch(emails, "batch-1").want(t, http.StatusOK, "")
	again := batch(emails, "batch-1").want(t, http.StatusOK, "")
	if again.header.Get(idempotency.ReplayedHeader) != "true" || first.header.Get(idempotency.ReplayedHeader) != "" ||
		string(again.raw) != string(first.raw) {
		t.Fatalf("first %s, replay %s %v", first.raw, again.raw, again.header)
	}
	batch([]string{"bob@acme.test"}, "batch-1").want(t, http.StatusConflict, "idempotency_key_reused")
	if c := b.usage(acct); c.Billable != len(emails) {
		t.Errorf("billed %d, want %d", c.Billable, len(emails))
	}
	// Without a key, the same batch is verified and billed again, as before.
	batch(emails, "").want(t, http.StatusOK, "")
	if c := b.usage(acct); c.Billable != 2*len(emails) {
		t.Errorf("billed %d, want %d", c.Billable, 2*len(emails))
	}
}

// BenchmarkSingleVerifyIdempotencyKey is what an Idempotency-Key costs a synchronous single
// verification, the API's fastest call (an address the verifier decides at once): the guard's
// claim and its sealed answer are two more Postgres round trips. It is why the clients send no
// key there (docs/clients.md; BENCHMARKS.md, "An Idempotency-Key on a single verification").
func BenchmarkSingleVerifyIdempotencyKey(b *testing.B) {
	v := setupVerify(b, verifyOpts{env: map[string]string{"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "1000000"}})
	_, key := v.customer(plan.Scale)
	body := map[string]string{"email": "ann@acme.test"}
	for i := range 20 { // warm the caches, the session and the pools
		v.call(http.MethodPost, "/v1/email/verify", key, body, idempotency.Header, fmt.Sprint("warm-", i)).want(b, http.StatusOK, "")
	}
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("key=%v", keyed), func(b *testing.B) {
			run := time.Now().UnixNano() // -count runs this again on the same server: new keys
			for i := 0; b.Loop(); i++ {
				var headers []string
				if keyed {
					headers = []string{idempotency.Header, fmt.Sprintf("bench-%d-%d", run, i)}
				}
				r := v.call(http.MethodPost, "/v1/email/verify", key, body, headers...).want(b, http.StatusOK, "")
				if r.header.Get(idempotency.ReplayedHeader) != "" {
					b.Fatalf("request %d was a replay", i)
				}
			}
		})
	}
}
