package api

import (
	"bytes"
	"context"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
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

// An async verify whose job commits while the API loses the COMMIT's answer (the connection to
// Postgres breaks right after the COMMIT left) is answered with an error, and the client retries
// with its Idempotency-Key: the retry gets the job that was stored, not a second one, and that
// job is billed once when it completes (docs/api.md, "Idempotency"; docs/reliability.md,
// "Metering guarantees").
func TestIdempotentAsyncVerifyWithLostCommitAnswer(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	api, pgProxy := b.proxiedAPI(t, "api-lost-commit", true)

	body := map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}
	verify := func() reply {
		return callHandler(t, api.Handler(), http.MethodPost, "/v1/email/verify", key, body, idempotency.Header, "order-lost")
	}
	pgProxy.CutAfter(commitAfter("INSERT INTO jobs"))
	first := verify()
	if first.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost the COMMIT's answer", first.status, first.raw)
	}
	var stored string
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT id::text FROM jobs WHERE account_id = $1`, acct).Scan(&stored),
		"the job of the first attempt, committed although its answer was lost")

	again := verify().want(t, http.StatusAccepted, "")
	if again.body["job_id"] != stored || again.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("the retry answered job %v (%v), want the stored job %s replayed", again.body["job_id"], again.header, stored)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("%d jobs, want the first attempt's only", n)
	}
	// The first attempt never queued its job: the job runner's sweep does so for a pending job,
	// under the same message id; this test does not wait for its 30 s.
	id, err := uuid.Parse(stored)
	mustOK(t, err)
	mustOK(t, queue.PublishJob(context.Background(), b.js, queue.Layout{}, id))
	wait.For(t, 10*time.Second, "the job to complete", func() bool {
		return b.count(`SELECT count(*) FROM jobs WHERE id = $1 AND state = 'completed'`, id) == 1
	})
	if n := b.rows(acct, func(r usagetest.Row) bool { return r.ItemKey == "job:"+stored && r.Billable }); n != 1 {
		t.Errorf("%d billable rows for the job, want 1", n)
	}
	if c := b.usage(acct); c.Billable != 1 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("counts %+v, want the one job billed and nothing held", c)
	}

	// A sandbox key's job, completed at once with its callback stored in the same transaction,
	// is not made twice either.
	a, mgmt := b.account(plan.Builder, "")
	sandbox := b.sandboxKey(mgmt)
	pgProxy.CutAfter(commitAfter("INSERT INTO jobs"))
	if r := callHandler(t, api.Handler(), http.MethodPost, "/v1/email/verify", sandbox, body, idempotency.Header, "order-lost"); r.status < 500 {
		t.Fatalf("sandbox: first attempt %d %s: want an error", r.status, r.raw)
	}
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT id::text FROM jobs WHERE account_id = $1`, a.ID).Scan(&stored),
		"the sandbox job of the first attempt")
	r := callHandler(t, api.Handler(), http.MethodPost, "/v1/email/verify", sandbox, body, idempotency.Header, "order-lost").
		want(t, http.StatusAccepted, "")
	if r.body["job_id"] != stored {
		t.Fatalf("sandbox: the retry answered job %v, want the stored job %s", r.body["job_id"], stored)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, a.ID); n != 1 {
		t.Fatalf("sandbox: %d jobs, want the first attempt's only", n)
	}
	if n := b.count(`SELECT count(*) FROM deliveries WHERE account_id = $1`, a.ID); n != 1 {
		t.Fatalf("sandbox: %d callbacks, want the first attempt's only", n)
	}
}

// An async verify whose transaction breaks before its COMMIT (the connection lost while the job
// is being inserted) stored nothing, so its hold goes back at once rather than holding the
// customer's quota until it expires; the retry with the key then runs.
func TestAsyncVerifyLostBeforeCommitReleasesItsHold(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	api, pgProxy := b.proxiedAPI(t, "api-lost-insert", true)

	body := map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet"}
	pgProxy.CutAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("INSERT INTO jobs")) })
	if r := callHandler(t, api.Handler(), http.MethodPost, "/v1/email/verify", key, body, idempotency.Header, "order-cut"); r.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost its connection mid-transaction", r.status, r.raw)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 0 {
		t.Fatalf("%d jobs after a transaction cut before its COMMIT, want none", n)
	}
	if c := b.usage(acct); c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want the hold of the job never stored given back", c)
	}
	r := callHandler(t, api.Handler(), http.MethodPost, "/v1/email/verify", key, body, idempotency.Header, "order-cut").
		want(t, http.StatusAccepted, "")
	if r.header.Get(idempotency.ReplayedHeader) == "true" {
		t.Fatalf("the retry was a replay of an answer never stored: %v", r.header)
	}
}

// proxiedPool is a pool on connString's database whose connections pass through a proxy the
// test cuts (pgtest.Proxied).
func proxiedPool(t *testing.T, connString string) (*pgxpool.Pool, *tcpproxy.Proxy) {
	t.Helper()
	url, pgProxy := pgtest.Proxied(t, connString)
	cfg, err := database.ParseConfig(url)
	mustOK(t, err)
	pool, err := database.OpenConfig(context.Background(), cfg)
	mustOK(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(pgProxy.Restore) // before the pool closes
	return pool, pgProxy
}

// proxiedAPI is a second API server on b's database and NATS whose Postgres connections pass
// through a proxy the test cuts; with workers, it waits until it sees b's verifier worker.
func (b *verifyBundle) proxiedAPI(t *testing.T, name string, workers bool) (*Server, *tcpproxy.Proxy) {
	t.Helper()
	pool, pgProxy := proxiedPool(t, b.pool.Config().ConnString())
	api := New(Deps{Config: b.cfg, Log: app.NewLogger(testLogOut(t), name), Pool: pool, NATS: b.srv.nc, JS: b.js,
		Ready: health.NewChecker(0), Local: b.engine})
	t.Cleanup(api.Close)
	if workers {
		wait.For(t, 15*time.Second, "the API under test to see the verifier worker", func() bool { return api.dispatch.WorkersAlive(context.Background()) })
	}
	return api, pgProxy
}

// commitAfter matches what a connection sent once it carries the COMMIT (a simple-query message,
// as pgx sends it) of a transaction that ran stmt.
func commitAfter(stmt string) func(sent []byte) bool {
	return func(sent []byte) bool {
		i := bytes.Index(sent, []byte(stmt))
		return i >= 0 && bytes.Contains(sent[i:], []byte("Q\x00\x00\x00\x0bcommit\x00"))
	}
}

// A list upload whose transaction commits while the API loses the COMMIT's answer is answered
// with an error, and the client uploads the file again with its Idempotency-Key: the retry gets
// the list that was stored (202, replayed), not a second list, and that list holds and bills its
// addresses once (docs/api.md, "Idempotency").
func TestIdempotentListUploadWithLostCommitAnswer(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, key := b.customer(plan.Builder)
	api, pgProxy := b.proxiedAPI(t, "api-lost-list-commit", false)
	file := "ann@acme.test\nbob@acme.test\nann@acme.test\n"
	upload := func() reply {
		return callHandler(t, api.Handler(), http.MethodPost, "/v1/email/lists?name=lost", key, file,
			"Content-Type", "text/plain", idempotency.Header, "upload-lost")
	}
	pgProxy.CutAfter(commitAfter("INSERT INTO lists ("))
	if first := upload(); first.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost the COMMIT's answer", first.status, first.raw)
	}
	// Postgres gets the COMMIT after the API saw its connection end.
	var stored string
	wait.For(t, 5*time.Second, "the list of the first attempt, committed although its answer was lost", func() bool {
		return b.pool.QueryRow(context.Background(), `SELECT id::text FROM lists WHERE account_id = $1`, acct).Scan(&stored) == nil
	})

	again := upload().want(t, http.StatusAccepted, "")
	if again.body["id"] != stored || again.header.Get("Location") != uploadPath+"/"+stored ||
		again.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("the retry answered list %v (%v), want the stored list %s replayed", again.body["id"], again.header, stored)
	}
	if again.body["state"] != "queued" || again.body["rows"] != float64(3) || again.body["unique"] != float64(2) {
		t.Errorf("replayed list %v, want the list as stored: queued, 3 rows, 2 unique addresses", again.body)
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("%d lists, want the first attempt's only", n)
	}
	if c := b.usage(acct); c.Held != 2 || c.Holds != 1 {
		t.Fatalf("counts %+v, want the one list's 2 addresses held once", c)
	}
	// The first attempt never started its list: the verifier workers' sweep starts a queued
	// list; this test does not wait for it.
	id, err := uuid.Parse(acct)
	mustOK(t, err)
	chunks, err := b.srv.lists.Start(context.Background(), id)
	mustOK(t, err)
	mustOK(t, queue.PublishChunks(context.Background(), b.js, queue.Layout{}, time.Second, chunks, nil))
	b.waitList(key, stored, "completed")
	if c := b.usage(acct); c.Billable != 2 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("counts %+v, want the list's 2 addresses billed once and nothing held", c)
	}
}

// A list upload whose transaction breaks before its COMMIT stored nothing: no list, nothing
// held, and its key is given back at once, so that the retry runs and stores the list.
func TestListUploadLostBeforeCommitReleasesItsKey(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Builder)
	api, pgProxy := b.proxiedAPI(t, "api-list-cut", false)
	file := "ann@acme.test\nbob@acme.test\n"
	upload := func() reply {
		return callHandler(t, api.Handler(), http.MethodPost, "/v1/email/lists", key, file,
			"Content-Type", "text/plain", idempotency.Header, "upload-cut")
	}
	pgProxy.CutAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("INSERT INTO list_addresses")) })
	if r := upload(); r.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost its connection mid-transaction", r.status, r.raw)
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 0 {
		t.Fatalf("%d lists after a transaction cut before its COMMIT, want none", n)
	}
	if c := b.usage(acct); c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want nothing held for a list never stored", c)
	}
	r := upload().want(t, http.StatusAccepted, "")
	if r.header.Get(idempotency.ReplayedHeader) == "true" {
		t.Fatalf("the retry was a replay of an answer never stored: %v", r.header)
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 1 {
		t.Fatalf("%d lists, want the retry's", n)
	}
}

// keyServer is an API server (management routes only) whose Postgres connections pass through a
// proxy the test cuts.
func keyServer(t *testing.T) (*testBundle, *Server, *tcpproxy.Proxy) {
	t.Helper()
	b := setup(t, map[string]string{"MAILVET_PLAN_BUILDER_MAX_KEYS": "2"})
	pool, pgProxy := proxiedPool(t, b.pool.Config().ConnString())
	api := New(Deps{Config: b.cfg, Log: app.NewLogger(testLogOut(t), "api-keys-cut"), Pool: pool, Ready: health.NewChecker(0)})
	t.Cleanup(api.Close)
	return b, api, pgProxy
}

// A key creation whose transaction commits while the API loses the COMMIT's answer is answered
// with an error, and the client retries with its Idempotency-Key: the retry gets the key that was
// made, secret and all (the only time it is shown), not a second key counted against max_keys
// (docs/api.md, "Idempotency").
func TestIdempotentKeyCreationWithLostCommitAnswer(t *testing.T) {
	t.Parallel()
	b, api, pgProxy := keyServer(t)
	a, mgmt := b.account(plan.Builder, "")
	create := func() reply {
		return callHandler(t, api.Handler(), http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci"},
			idempotency.Header, "key-lost")
	}
	pgProxy.CutAfter(commitAfter("INSERT INTO api_keys"))
	if first := create(); first.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost the COMMIT's answer", first.status, first.raw)
	}
	// Postgres gets the COMMIT after the API saw its connection end.
	var stored, prefix string
	wait.For(t, 5*time.Second, "the key of the first attempt, committed although its answer was lost", func() bool {
		return b.pool.QueryRow(context.Background(), `SELECT id::text, prefix FROM api_keys WHERE account_id = $1 AND kind = 'standard'`,
			a.ID).Scan(&stored, &prefix) == nil
	})

	again := create().want(t, http.StatusCreated, "")
	raw, _ := again.body["key"].(string)
	if again.body["id"] != stored || again.body["prefix"] != prefix || again.header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("the retry answered key %v %v (%v), want the stored key %s (%s) replayed", again.body["id"], again.body["prefix"], again.header, stored, prefix)
	}
	// The replayed secret is the stored key's: it authenticates.
	keys := callHandler(t, api.Handler(), http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, http.StatusOK, "")
	if got := len(keys.body["keys"].([]any)); got != 1 {
		t.Fatalf("%d keys, want the first attempt's only: %s", got, keys.raw)
	}
	callHandler(t, api.Handler(), http.MethodGet, "/v1/email/lists", raw, nil).want(t, http.StatusOK, "")
	// One key counted against max_keys (2): one more fits.
	callHandler(t, api.Handler(), http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "two"}).
		want(t, http.StatusCreated, "")
}

// A key creation whose transaction breaks before its COMMIT made no key, and gives its
// Idempotency-Key back at once: the retry runs and makes the key.
func TestKeyCreationLostBeforeCommitReleasesItsKey(t *testing.T) {
	t.Parallel()
	b, api, pgProxy := keyServer(t)
	a, mgmt := b.account(plan.Builder, "")
	create := func() reply {
		return callHandler(t, api.Handler(), http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "ci"},
			idempotency.Header, "key-cut")
	}
	pgProxy.CutAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("INSERT INTO api_keys")) })
	if r := create(); r.status < 500 {
		t.Fatalf("first attempt %d %s: want an error, the API lost its connection mid-transaction", r.status, r.raw)
	}
	var n int
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`,
		a.ID).Scan(&n), "count keys")
	if n != 0 {
		t.Fatalf("%d keys after a transaction cut before its COMMIT, want none", n)
	}
	r := create().want(t, http.StatusCreated, "")
	if r.header.Get(idempotency.ReplayedHeader) == "true" {
		t.Fatalf("the retry was a replay of an answer never stored: %v", r.header)
	}
}
