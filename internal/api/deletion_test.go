package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/privacy/privacytest"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/internal/webhook"
)

// accountTrace is everything a test account stored, to look for after its deletion.
type accountTrace struct {
	id, owner string
	addrs     []string // the data subjects' addresses it verified, one per route
	ids       []string // ids of its rows: keys, jobs, lists, deliveries, the dashboard user
	keys      []string // its raw keys, every one
}

// fillAccount signs up a dashboard account and stores one of each kind of data through the
// routes that store it: a failed sign-in, keys created with the management API (standard and
// sandbox), a verification, a batch with an Idempotency-Key, an asynchronous job whose callback
// is still being attempted, a list uploaded with a callback, a list uploaded on the dashboard,
// a sandbox verification; and, where no route makes one on demand, the row as its writer does:
// a mailed link's token, a hold of a request in flight, an attempt of the callback with the
// receiver's answer.
func fillAccount(t *testing.T, b *verifyBundle, name string) (*dashboardClient, string, accountTrace) {
	t.Helper()
	owner := "owner-" + name + "@owner.test"
	d, acct := newDashboardClient(t, b, owner)
	tr := accountTrace{id: acct, owner: owner}
	// A wrong password from a browser that is not signed in: the sign-in throttle's counters.
	jar, _ := cookiejar.New(nil)
	anon := &dashboardClient{t: t, base: d.base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	anon.post("/dashboard/signin", url.Values{"csrf": {anon.csrf("/dashboard/signin")}, "email": {owner}, "password": {"not the password at all"}})

	created, err := b.store.CreateProvisioningKey(context.Background(), acct)
	pgtest.Must(t, err, "provisioning key")
	mgmt := created.Raw
	std := b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]string{"label": "prod key of " + name}).want(t, http.StatusCreated, "").body
	key := std["key"].(string)
	sandbox := b.sandboxKey(mgmt)
	tr.keys = []string{mgmt, key, sandbox}
	tr.ids = append(tr.ids, std["id"].(string), created.ID)

	tr.addrs = []string{"ann@acme.test", "bob@acme.test", "info@acme.test", "carol." + name + "@acme.test", "dave." + name + "@acme.test"}
	b.verify(key, map[string]string{"email": tr.addrs[0]}).want(t, http.StatusOK, "")
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{tr.addrs[1]}},
		"Idempotency-Key", "idem-"+name).want(t, http.StatusOK, "")
	job := b.verify(key, map[string]string{"email": tr.addrs[2], "webhook_url": "https://hooks.example.com/" + name}).
		want(t, http.StatusAccepted, "").body["job_id"].(string)
	b.waitJob(t, key, job)
	list := b.upload(key, "text/csv", "?name=june&webhook_url=https://hooks.example.com/lists",
		"email,name\n"+tr.addrs[3]+",Carol Listed\n").want(t, http.StatusAccepted, "").body["id"].(string)
	b.waitList(key, list, "completed")
	// The Lists page's form, with its one-time token as the page renders it.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("csrf", d.csrf("/dashboard/lists"))
	_ = mw.WriteField("upload_token", "form-token-"+name)
	_ = mw.WriteField("key_id", std["id"].(string))
	_ = mw.WriteField("format", "csv")
	_ = mw.WriteField("name", "mine")
	fw, _ := mw.CreateFormFile("file", "mine.csv")
	_, _ = io.WriteString(fw, "email,name\n"+tr.addrs[4]+",Dave Uploaded\n")
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, d.base+"/dashboard/lists", &form)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if resp, body := d.do(req); resp.StatusCode >= 400 {
		t.Fatalf("dashboard upload: %d\n%s", resp.StatusCode, body)
	}
	b.verify(sandbox, map[string]string{"email": "accepted@sandbox.mailvet.test"}).want(t, http.StatusOK, "")
	b.settle()
	tr.ids = append(tr.ids, job, list)

	// The job's callback: attempted once, refused by the receiver, to be retried.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'retrying', attempts = 1, next_attempt_at = now() + interval '1 minute'
		WHERE job_id = $1`, job)
	pgtest.Exec(t, b.pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, http_status, response_body)
		SELECT id, 1, now(), 5, 500, 'unknown recipient ' || $2 FROM deliveries WHERE job_id = $1`, job, tr.addrs[2])
	pgtest.Exec(t, b.pool, `INSERT INTO dashboard_email_tokens (token_hash, user_id, purpose, expires_at)
		SELECT sha256(convert_to($1::text, 'UTF8')), id, 'reset', now() + interval '1 hour' FROM dashboard_users WHERE account_id = $2`, name, acct)
	pgtest.Exec(t, b.pool, `INSERT INTO usage_holds (id, account_id, month, units, free) VALUES (gen_random_uuid(), $1, date_trunc('month', now())::date, 1, true)`, acct)
	var user string
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT id::text FROM dashboard_users WHERE account_id = $1`, acct).Scan(&user), "user")
	tr.ids = append(tr.ids, user)

	// Every table that has an account_id column holds a row of this account (a table added
	// later without a row here fails the test: add its kind of data above).
	for _, table := range accountTables(t, b) {
		if table == "accounts" {
			continue
		}
		var n int
		pgtest.Must(t, b.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %q WHERE account_id = $1`, table), acct).Scan(&n), table)
		if n == 0 {
			t.Errorf("the fixture stored no row in %s", table)
		}
	}
	for _, table := range []string{"dashboard_sessions", "dashboard_email_tokens", "delivery_attempts", "list_rows", "list_addresses", "list_counts"} {
		if n := b.count(`SELECT count(*) FROM ` + table); n == 0 {
			t.Errorf("the fixture stored no row in %s", table)
		}
	}
	return d, mgmt, tr
}

// accountTables lists every table of the public schema with an account_id column.
func accountTables(t *testing.T, b *verifyBundle) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' AND c.column_name = 'account_id'
		ORDER BY 1`)
	pgtest.Must(t, err, "tables")
	var tables []string
	for rows.Next() {
		var s string
		pgtest.Must(t, rows.Scan(&s), "table")
		tables = append(tables, s)
	}
	rows.Close()
	if len(tables) < 10 {
		t.Fatalf("tables with account_id: %v", tables)
	}
	return tables
}

// An account with one of each kind of data is deleted, with the management API and on the
// dashboard: afterwards no table with an account_id column holds a row of it, but those
// docs/personal-data.md keeps by design (the billing counts and the deletion's one audit event),
// and these hold neither an address nor the owner's email; no table anywhere holds its addresses,
// owner, keys or the ids of its rows; no callback of it is left to send; no NATS message or
// key-value entry holds its addresses; and every key of it is refused on two replicas.
func TestAccountDeletionLeavesNoRowOfTheAccount(t *testing.T) {
	for _, via := range []string{"api", "dashboard"} {
		t.Run(via, func(t *testing.T) {
			b := setupVerify(t, verifyOpts{})
			d, mgmt, tr := fillAccount(t, b, via)
			other, otherKey := b.customer("free")
			b.verify(otherKey, map[string]string{"email": tr.addrs[0]}).want(t, http.StatusOK, "")

			if via == "api" {
				b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": tr.id}).want(t, http.StatusNoContent, "")
			} else {
				resp, body := d.post("/dashboard/settings/data/delete", url.Values{"csrf": {d.csrf("/dashboard/settings/data")},
					"confirm": {tr.owner}, "password": {"a long enough password for the test"}})
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Account deleted") {
					t.Fatalf("dashboard deletion: %d\n%s", resp.StatusCode, body)
				}
			}

			// Every key, on this replica and another on its own pool.
			pool2 := pgtest.Pool(t, b.pool.Config().ConnString())
			replica := New(Deps{Config: b.cfg, Log: app.NewLogger(io.Discard, "replica"), Pool: pool2, Ready: health.NewChecker(0)})
			t.Cleanup(replica.Close)
			for _, h := range []http.Handler{b.srv.Handler(), replica.Handler()} {
				callHandler(t, h, http.MethodGet, "/v1/management/account", tr.keys[0], nil).want(t, http.StatusUnauthorized, CodeInvalidAPIKey)
				for _, k := range tr.keys[1:] {
					callHandler(t, h, http.MethodPost, "/v1/email/verify", k, map[string]string{"email": tr.addrs[0]}).
						want(t, http.StatusUnauthorized, CodeInvalidAPIKey)
				}
			}
			// The dashboard session is gone.
			req, _ := http.NewRequest(http.MethodGet, d.base+"/dashboard/settings/data", nil)
			if resp, _ := d.do(req); resp.StatusCode != http.StatusSeeOther {
				t.Errorf("the deleted account's session still opens the dashboard: %d", resp.StatusCode)
			}
			b.waitConsumed(t, queue.StreamJobs, queue.ConsumerJobRunners)
			b.settle()

			// The tables with an account_id: only what is kept by design, with no address in it.
			kept := map[string]bool{"usage_monthly": true, "usage_daily": true, "audit_events": true}
			needles := append([]string{tr.owner}, tr.addrs...)
			for _, table := range accountTables(t, b) {
				if table == "accounts" {
					continue
				}
				var n int
				var text string
				pgtest.Must(t, b.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*), coalesce(string_agg(row_to_json(t)::text, ' '), '')
					FROM %q t WHERE account_id = $1`, table), tr.id).Scan(&n, &text), table)
				if n > 0 && !kept[table] {
					t.Errorf("%s keeps %d rows of the deleted account: %s", table, n, text)
				}
				for _, s := range needles {
					if strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
						t.Errorf("%s keeps %s: %s", table, s, text)
					}
				}
			}
			var kinds []string
			pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(kind), '{}') FROM audit_events WHERE account_id = $1`, tr.id).Scan(&kinds), "audit")
			if len(kinds) != 1 || kinds[0] != "account_deleted" {
				t.Errorf("audit events of the deleted account: %v; want its deletion's only", kinds)
			}
			var email *string
			var erased *time.Time
			pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT email, erased_at FROM accounts WHERE id = $1`, tr.id).Scan(&email, &erased), "tombstone")
			if email != nil || erased == nil {
				t.Errorf("tombstone: email %v, erased_at %v", email, erased)
			}
			// Every table, whether it has an account_id or not.
			for _, s := range append(append(needles[:1:1], tr.ids...), tr.addrs[1:]...) {
				if hits := privacytest.Find(t, b.pool, s); len(hits) > 0 {
					t.Errorf("%s is still stored in %v", s, hits)
				}
			}
			if hits := privacytest.Find(t, b.pool, tr.addrs[0]); len(hits) == 0 {
				t.Error("the other account's result for the same address went with the deleted one")
			}
			for _, k := range tr.keys {
				sum := sha256.Sum256([]byte(k))
				if n := b.count(`SELECT count(*) FROM api_keys WHERE key_hash = $1`, sum[:]); n != 0 {
					t.Errorf("the hash of a deleted key is kept")
				}
			}
			acctSubject := sha256.Sum256([]byte(tr.owner))
			if n := b.count(`SELECT count(*) FROM dashboard_signin_failures WHERE subject = $1`, "account:"+hex.EncodeToString(acctSubject[:])); n != 0 {
				t.Error("the sign-in throttle keeps the owner's counter")
			}
			if n := b.count(`SELECT count(*) FROM audit_events WHERE account_id = $1`, other); n != 0 {
				t.Errorf("the other account has %d audit events", n)
			}

			// NATS: no message of any stream, key-value buckets included, holds an address of
			// the account (its work is done, and acknowledged messages are removed).
			ctx := context.Background()
			names := b.js.StreamNames(ctx)
			for name := range names.Name() {
				s, err := b.js.Stream(ctx, name)
				mustOK(t, err)
				info, err := s.Info(ctx)
				mustOK(t, err)
				for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
					m, err := s.GetMsg(ctx, seq)
					if err != nil {
						continue // deleted from the middle of the stream
					}
					for _, a := range tr.addrs[1:] {
						if strings.Contains(string(m.Data), a) || strings.Contains(m.Subject, a) {
							t.Errorf("stream %s message %d holds %s: %s", name, seq, a, m.Data)
						}
					}
				}
			}
			mustOK(t, names.Err())
		})
	}
}

// A callback of the account's finished work still being attempted when the account is deleted
// is never sent again, even while the deletion's second step is still erasing the account's
// lists (a large list takes minutes; here the erasure of the list fails, as a deletion cut short
// does): the deletion's first step stops it with the rest of the work still running
// (docs/personal-data.md, "Deleting an account").
func TestDeletedAccountsCallbacksStopAtOnce(t *testing.T) {
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_WEBHOOK_ALLOW_PRIVATE": "true"}})
	const host = "hooks.deletion.test"
	ca := tlstest.New(t, host)
	var mu sync.Mutex
	var hits []time.Time
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		hits = append(hits, time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable) // retried, about a second later
	}))
	rc.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf}}
	rc.StartTLS()
	t.Cleanup(rc.Close)
	b.mail.AddDomain(host, mailsim.Domain{A: []string{"127.0.0.1"}})
	hook := fmt.Sprintf("https://%s:%d/mailvet", host, rc.Listener.Addr().(*net.TCPAddr).Port)
	nc, err := nats.Connect(b.natsURL)
	mustOK(t, err)
	js, _ := jetstream.New(nc)
	ww, err := webhook.NewWorker(b.pool, js, webhook.Options{
		Client: webhook.ClientOptions{AllowPrivate: true, DNSResolver: b.cfg.DNSResolver, RootCAs: ca.Pool},
		Log:    app.NewLogger(io.Discard, "webhook"),
	})
	mustOK(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{ww.Run, ww.RunSweeper} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait(); nc.Close() })

	a, mgmt := b.account("free", "")
	key := b.standardKey(a.ID).Raw
	list := b.upload(key, "text/csv", "", "email\nbob@acme.test\n").want(t, http.StatusAccepted, "").body["id"].(string)
	b.waitList(key, list, "completed")
	b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": hook}).want(t, http.StatusAccepted, "")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(hits)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no first attempt of the callback")
		}
	}

	pgtest.Exec(t, b.pool, `CREATE FUNCTION slow_list() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'the list is still being erased'; END $$`)
	pgtest.Exec(t, b.pool, `CREATE TRIGGER slow_list BEFORE DELETE ON lists FOR EACH ROW EXECUTE FUNCTION slow_list()`)
	b.call(http.MethodDelete, "/v1/management/account", mgmt, map[string]any{"confirm": a.ID}).want(t, http.StatusNoContent, "")
	deleted := time.Now()

	time.Sleep(3 * time.Second) // two more attempts' backoff
	mu.Lock()
	defer mu.Unlock()
	for _, at := range hits {
		if at.After(deleted) {
			t.Errorf("the deleted account's callback was sent %v after its deletion", at.Sub(deleted))
		}
	}
	if n := b.count(`SELECT count(*) FROM deliveries WHERE account_id = $1 AND state IN ('pending', 'retrying')`, a.ID); n != 0 {
		t.Errorf("%d callbacks of the deleted account are still to be sent", n)
	}
}
