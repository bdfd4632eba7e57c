package privacy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/idempotency"
	"github.com/mailvet/mailvet/internal/privacy/privacytest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
	"github.com/mailvet/mailvet/internal/verdict"
)

// fixture is an account with a row in every table that holds an account's data, written as the
// services write them: a user with a session, keys, usage rows with snapshots, jobs with their
// deliveries and attempts, a finished list with rows and results, idempotency records, upload
// tokens, rate windows, holds, billing counts and sign-in failures.
type fixture struct {
	id, email string
	addrs     []string // the addresses it verified
	jobs      []uuid.UUID
	list      uuid.UUID
}

var ctx = context.Background()

func seed(t *testing.T, pool *pgxpool.Pool, name string, at time.Time) fixture {
	t.Helper()
	f := fixture{id: uuid.NewString(), email: name + "@owner.example",
		addrs: []string{"ann." + name + "@acme.example", "bob." + name + "@acme.example"}}
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email, stripe_customer_id, created_at) VALUES ($1, 'free', $2, $3, $4)`,
		f.id, f.email, "cus_"+name, at)
	user := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO dashboard_users (id, account_id, email, email_folded, password_hash) VALUES ($1, $2, $3, $4, $5)`,
		user, f.id, f.email, strings.ToLower(f.email), "hash-"+f.id)
	pgtest.Exec(t, pool, `INSERT INTO dashboard_sessions (token_hash, user_id, csrf_secret, expires_at)
		VALUES (sha256(convert_to($1::text, 'UTF8')), $2, sha256(convert_to($3::text, 'UTF8')), now() + interval '1 hour')`, f.id, user, user)
	pgtest.Exec(t, pool, `INSERT INTO dashboard_signin_failures (subject, window_start, failures)
		VALUES ('account:' || encode(sha256(convert_to(lower($1::text), 'UTF8')), 'hex'), now(), 2)`, f.email)
	key := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO api_keys (id, account_id, kind, label, key_hash, prefix)
		VALUES ($1, $2, 'standard', $3, sha256(convert_to($4::text, 'UTF8')), 'sk_live_ab…')`, key, f.id, "key of "+f.email, key)
	for i, a := range f.addrs {
		snap := fmt.Sprintf(`{"email":%q,"status":"deliverable"}`, a)
		pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, key_id, item_key, occurred_at, route, email_domain, status, billable, quota_unit, snapshot)
			VALUES ($1, $2, $3, $4, 'verify', 'acme.example', 'deliverable', true, true, $5)`,
			f.id, key, fmt.Sprintf("req-%s-%d", f.id, i), at, snap)
		job := uuid.New()
		f.jobs = append(f.jobs, job)
		pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, key_id, email, webhook_url, webhook_secret, state, result, created_at, completed_at)
			VALUES ($1, $2, $3, $4, $7, $8, 'completed', $5, $6, $6)`,
			job, f.id, key, a, snap, at, "https://hooks.example/"+f.id, "secret-of-"+f.id)
		d := uuid.New()
		pgtest.Exec(t, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, attempts, created_at, finished_at)
			VALUES ($1, $2, $3, $6, convert_to($4::text, 'UTF8'), 'delivered', 1, $5, $5)`, d, job, f.id, snap, at, "https://hooks.example/"+f.id)
		pgtest.Exec(t, pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, http_status, response_body)
			VALUES ($1, 1, $2, 5, 200, $3)`, d, at, "ok for "+a)
	}
	f.list = uuid.New()
	pgtest.Exec(t, pool, `INSERT INTO lists (id, account_id, key_id, name, format, columns, email_column, state, rows, unique_addresses, verified, webhook_url, webhook_secret, created_at, finished_at)
		VALUES ($1, $2, $3, $4, 'csv', '{email,name}', 0, 'completed', 2, 2, 2, 'https://hooks.example/l', 's', $5, $5)`,
		f.list, f.id, key, "list of "+f.email, at)
	for i, a := range f.addrs {
		pgtest.Exec(t, pool, `INSERT INTO list_rows (list_id, row_no, email, cols) VALUES ($1, $2, $3, $4)`, f.list, i+1, a, []string{a, "Name " + a})
		pgtest.Exec(t, pool, `INSERT INTO list_addresses (list_id, email, idx, chunk, status, reason, result)
			VALUES ($1, $2, $3, 0, 'deliverable', 'accepted_email', jsonb_build_object('email', $2::text))`, f.list, a, i)
	}
	pgtest.Exec(t, pool, `INSERT INTO list_counts (list_id, status, reason, n) VALUES ($1, 'deliverable', 'accepted_email', 2)`, f.list)
	pgtest.Exec(t, pool, `INSERT INTO deliveries (id, list_id, account_id, url, body, state, created_at, finished_at)
		VALUES ($1, $2, $3, 'https://hooks.example/l', convert_to($5::text, 'UTF8'), 'delivered', $4, $4)`, uuid.New(), f.list, f.id, at, `{"list":"`+f.list.String()+`"}`)
	pgtest.Exec(t, pool, `INSERT INTO idempotency_keys (account_id, key, owner, claimed_at, expires_at, status, body, subjects)
		VALUES ($1, $3, gen_random_uuid(), now(), now() + interval '1 day', 200, convert_to($2::text, 'UTF8'), $4)`,
		f.id, f.addrs[0], "idem-"+f.id, [][]byte{idempotency.Subject(f.id, f.addrs[0])})
	pgtest.Exec(t, pool, `INSERT INTO dashboard_upload_tokens (account_id, token_hash) VALUES ($1, sha256(convert_to($2::text, 'UTF8')))`, f.id, f.id)
	pgtest.Exec(t, pool, `INSERT INTO rate_windows (account_id, window_start, used) VALUES ($1, date_trunc('minute', now()), 3)`, f.id)
	pgtest.Exec(t, pool, `INSERT INTO usage_holds (id, account_id, month, units, free) VALUES (gen_random_uuid(), $1, date_trunc('month', now())::date, 1, true)`, f.id)
	pgtest.Exec(t, pool, `INSERT INTO usage_monthly (account_id, month, quota_units, billable, held) VALUES ($1, date_trunc('month', now())::date, 2, 2, 1)`, f.id)
	pgtest.Exec(t, pool, `INSERT INTO usage_daily (account_id, day, billable) VALUES ($1, current_date, 2)`, f.id)
	return f
}

// findEverywhere is privacytest.Find.
func findEverywhere(t *testing.T, pool *pgxpool.Pool, needle string) []string {
	t.Helper()
	return privacytest.Find(t, pool, needle)
}

func TestDeleteAccountLeavesOnlyAnonymousBillingCounts(t *testing.T) {
	pool := pgtest.New(t)
	gone := seed(t, pool, "gone", time.Now())
	kept := seed(t, pool, "kept", time.Now())

	if err := DeleteAccount(ctx, pool, gone.id, byTest); err != nil {
		t.Fatalf("DeleteAccount: %v", err)
	}
	for _, needle := range append([]string{gone.email, "cus_gone"}, gone.addrs...) {
		if needle == "cus_gone" {
			continue // the Stripe customer's id stays on the tombstone (docs/personal-data.md)
		}
		if hits := findEverywhere(t, pool, needle); len(hits) > 0 {
			t.Errorf("%s is still stored in %v", needle, hits)
		}
	}
	// The id: only the tombstone and the billing counts keep it.
	hits := findEverywhere(t, pool, gone.id)
	allowed := map[string]bool{"accounts.id": true, "usage_monthly.account_id": true, "usage_daily.account_id": true, "audit_events.account_id": true}
	for _, h := range hits {
		if !allowed[h] {
			t.Errorf("the deleted account's id is still in %s", h)
		}
	}
	if len(hits) != len(allowed) {
		t.Errorf("the id is in %v; want exactly the tombstone and the billing counts", hits)
	}
	// What stays in the audit log is the deletion's one event, naming no person.
	var kinds []string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT array_agg(kind) FROM audit_events WHERE account_id = $1`, gone.id).Scan(&kinds), "audit")
	if len(kinds) != 1 || kinds[0] != string(audit.AccountDeleted) {
		t.Errorf("audit events left of the deleted account: %v, want one account_deleted", kinds)
	}
	var billable, held int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT billable, held FROM usage_monthly WHERE account_id = $1`, gone.id).Scan(&billable, &held), "counts")
	if billable != 2 || held != 0 {
		t.Errorf("billing counts after deletion: billable %d held %d; want 2 and 0", billable, held)
	}
	var email *string
	var deleted *time.Time
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT email, deleted_at FROM accounts WHERE id = $1`, gone.id).Scan(&email, &deleted), "tombstone")
	if email != nil || deleted == nil {
		t.Errorf("tombstone: email %v deleted_at %v; want no email and a deletion time", email, deleted)
	}

	// The other account is untouched.
	for _, needle := range append([]string{kept.email}, kept.addrs...) {
		if hits := findEverywhere(t, pool, needle); len(hits) == 0 {
			t.Errorf("%s of the other account is gone", needle)
		}
	}
	// Nothing brings the tombstone back: no key can be created for it, nor is it read.
	store := account.NewStore(pool)
	if _, err := store.CreateProvisioningKey(ctx, gone.id); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("a provisioning key for the deleted account: %v; want account.ErrNotFound", err)
	}
	if _, err := store.Get(ctx, gone.id); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("reading the deleted account: %v; want account.ErrNotFound", err)
	}
	// Deleting again: the account is not there any more.
	if err := DeleteAccount(ctx, pool, gone.id, byTest); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteAccount: %v; want ErrNotFound", err)
	}
}

func TestDeleteAccountRefusesAPayingAccount(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "paying", time.Now())
	pgtest.Exec(t, pool, `UPDATE accounts SET tier = 'builder', subscription_status = 'active' WHERE id = $1`, f.id)
	if err := DeleteAccount(ctx, pool, f.id, byTest); !errors.Is(err, ErrSubscriptionActive) {
		t.Fatalf("DeleteAccount of a paying account: %v; want ErrSubscriptionActive", err)
	}
	if hits := findEverywhere(t, pool, f.email); len(hits) == 0 {
		t.Error("a refused deletion removed the account's data")
	}
	pgtest.Exec(t, pool, `UPDATE accounts SET subscription_status = 'canceled', tier = 'free' WHERE id = $1`, f.id)
	if err := DeleteAccount(ctx, pool, f.id, byTest); err != nil {
		t.Fatalf("DeleteAccount once the subscription ended: %v", err)
	}
}

// Work in flight at a deletion (a request admitted in the same instant) may still write; the
// retention loop's sweep removes it, and workers finishing a deleted job or list write nothing.
func TestSweepDeletedRemovesWhatWorkInFlightWrote(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "late", time.Now())
	pgtest.Must(t, DeleteAccount(ctx, pool, f.id, byTest), "delete")
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route, email_domain, snapshot)
		VALUES ($1, 'late-row', 'verify', 'acme.example', jsonb_build_object('email', $2::text))`, f.id, f.addrs[0])
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url) VALUES (gen_random_uuid(), $1, $2, '')`, f.id, f.addrs[1])
	n, err := SweepDeleted(ctx, pool, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("SweepDeleted: %d rows, %v; want 2", n, err)
	}
	for _, a := range f.addrs {
		if hits := findEverywhere(t, pool, a); len(hits) > 0 {
			t.Errorf("%s still stored in %v after the sweep", a, hits)
		}
	}
	// A day after the deletion, nothing in flight can remain: the account is no longer swept.
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route) VALUES ($1, 'later-row', 'verify')`, f.id)
	if n, err := SweepDeleted(ctx, pool, time.Now().Add(25*time.Hour)); err != nil || n != 0 {
		t.Errorf("SweepDeleted a day later: %d rows, %v; want 0", n, err)
	}
}

// A deletion whose second step was cut short (a crash after the tombstone committed) is
// finished by the sweep, in bounded runs, however long ago it was deleted.
func TestAnErasureCutShortIsFinishedByTheSweep(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "cut", time.Now())
	pgtest.Must(t, DeleteAccount(ctx, pool, f.id, byTest), "delete")
	var erased *time.Time
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT erased_at FROM accounts WHERE id = $1`, f.id).Scan(&erased), "erased_at")
	if erased == nil {
		t.Fatal("a deletion that ran to its end did not mark the account erased")
	}
	// As if the erasure had never run: the account's rows are back and it is not marked.
	pgtest.Exec(t, pool, `UPDATE accounts SET erased_at = NULL WHERE id = $1`, f.id)
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route, snapshot)
		SELECT $1, 'cut-'||i, 'verify', jsonb_build_object('email', $2::text) FROM generate_series(1, 12000) i`, f.id, f.addrs[0])
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url) VALUES (gen_random_uuid(), $1, $2, '')`, f.id, f.addrs[1])

	// One bounded step leaves the rest, and says so.
	n, done, err := Erase(ctx, pool, f.id, 1)
	if err != nil || done || n != 1+eraseBatch {
		t.Fatalf("Erase with one batch: %d rows, done %v, %v; want %d and not done", n, done, err, 1+eraseBatch)
	}
	// A week later the sweep still finishes it.
	later := time.Now().Add(7 * 24 * time.Hour)
	var total int64
	for range 3 {
		m, err := SweepDeleted(ctx, pool, later)
		pgtest.Must(t, err, "sweep")
		total += m
	}
	if total != 12000-eraseBatch {
		t.Errorf("the sweeps deleted %d rows; want %d", total, 12000-eraseBatch)
	}
	for _, a := range f.addrs {
		if hits := findEverywhere(t, pool, a); len(hits) > 0 {
			t.Errorf("%s still stored in %v", a, hits)
		}
	}
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT erased_at FROM accounts WHERE id = $1`, f.id).Scan(&erased), "erased_at")
	if erased == nil {
		t.Error("the sweep did not mark the account erased")
	}
	if m, err := SweepDeleted(ctx, pool, later); err != nil || m != 0 {
		t.Errorf("a sweep after the account was erased: %d rows, %v", m, err)
	}
}

func TestRetentionWithAMovedClock(t *testing.T) {
	pool := pgtest.New(t)
	start := time.Now()
	clock := testclock.New(start)
	f := seed(t, pool, "old", start)
	// A job finished as long ago whose callback is still retrying keeps its data.
	pending := uuid.New()
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, result, completed_at)
		VALUES ($1, $2, 'wait@acme.example', 'https://hooks.example/', 'completed', '{}', $3)`, pending, f.id, start)
	pgtest.Exec(t, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state) VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example/', '\x7b7d', 'retrying')`,
		pending, f.id)

	r := Retainer{DB: pool, Retention: Retention{Results: 30 * 24 * time.Hour, Jobs: 7 * 24 * time.Hour},
		Interval: 20 * time.Millisecond, Now: clock.Now}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()

	snapshots := func() (n int) {
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND snapshot IS NOT NULL`, f.id).Scan(&n), "snapshots")
		return n
	}
	expired := func() (n int) {
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE account_id = $1 AND expired_at IS NOT NULL`, f.id).Scan(&n), "jobs")
		return n
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	time.Sleep(100 * time.Millisecond) // a few runs at the start: nothing is old enough
	if snapshots() != 2 || expired() != 0 {
		t.Fatalf("at the start: %d snapshots, %d expired jobs; want 2 and 0", snapshots(), expired())
	}
	clock.Add(8 * 24 * time.Hour)
	waitFor("jobs to expire", func() bool { return expired() == 2 })
	if snapshots() != 2 {
		t.Fatalf("after 8 days the snapshots went too: %d left", snapshots())
	}
	var email string
	var result []byte
	var secret *string
	var state string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT email, result, webhook_secret, state FROM jobs WHERE id = $1`, f.jobs[0]).
		Scan(&email, &result, &secret, &state), "expired job")
	if email != "" || result != nil || secret != nil || state != "completed" {
		t.Errorf("expired job: email %q result %s secret %v state %s; want all removed and the state kept", email, result, secret, state)
	}
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT email FROM jobs WHERE id = $1`, pending).Scan(&email), "pending job")
	if email == "" {
		t.Error("a job whose callback is still retrying lost its data")
	}

	clock.Add(23 * 24 * time.Hour)
	waitFor("snapshots to go", func() bool { return snapshots() == 0 })
	var rows, domains int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*), count(email_domain) FROM usage_log WHERE account_id = $1`, f.id).Scan(&rows, &domains), "usage rows")
	if rows != 2 || domains != 2 {
		t.Errorf("usage rows after retention: %d with %d domains; want both kept for billing", rows, domains)
	}
}

// Several replicas run the retention at once: they share the rows, none twice, none left.
func TestPurgeSharedByReplicas(t *testing.T) {
	pool := pgtest.New(t)
	old := time.Now().Add(-40 * 24 * time.Hour)
	f := seed(t, pool, "many", old)
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, occurred_at, route, snapshot)
		SELECT $1, 'bulk-'||i, $2, 'verify_batch', jsonb_build_object('email', 'x'||i||'@acme.example')
		FROM generate_series(1, 3000) i`, f.id, old)
	var (
		mu    sync.Mutex
		total int64
		wg    sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := Purge(ctx, pool, time.Now(), Defaults(), 100, 100)
			if err != nil {
				t.Errorf("Purge: %v", err)
			}
			mu.Lock()
			total += p.Snapshots
			mu.Unlock()
		}()
	}
	wg.Wait()
	var left int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM usage_log WHERE snapshot IS NOT NULL`).Scan(&left), "left")
	if total != 3002 || left != 0 {
		t.Errorf("replicas cleared %d snapshots, %d left; want 3002 and 0", total, left)
	}
}

func TestExportContainsTheAccountsData(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "exp", time.Now())
	other := seed(t, pool, "other", time.Now())
	var buf bytes.Buffer
	if err := Export(ctx, pool, f.id, &buf); err != nil {
		t.Fatalf("Export: %v", err)
	}
	var doc struct {
		Account struct {
			AccountID string `json:"account_id"`
			Email     string `json:"email"`
		} `json:"account"`
		Users      []map[string]any `json:"users"`
		Keys       []map[string]any `json:"keys"`
		Jobs       []map[string]any `json:"jobs"`
		Lists      []map[string]any `json:"lists"`
		Deliveries []map[string]any `json:"deliveries"`
		Results    []struct {
			Result struct{ Email string } `json:"result"`
		} `json:"results"`
		Usage     []map[string]any `json:"usage"`
		Truncated []string         `json:"truncated"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, buf.String())
	}
	if doc.Account.AccountID != f.id || doc.Account.Email != f.email {
		t.Errorf("account: %+v", doc.Account)
	}
	if len(doc.Users) != 1 || len(doc.Keys) != 1 || len(doc.Jobs) != 2 || len(doc.Lists) != 1 || len(doc.Deliveries) != 3 ||
		len(doc.Results) != 2 || len(doc.Usage) != 1 || len(doc.Truncated) != 0 {
		t.Errorf("sections: %d users, %d keys, %d jobs, %d lists, %d deliveries, %d results, %d months, truncated %v",
			len(doc.Users), len(doc.Keys), len(doc.Jobs), len(doc.Lists), len(doc.Deliveries), len(doc.Results), len(doc.Usage), doc.Truncated)
	}
	if len(doc.Results) > 0 && doc.Results[0].Result.Email != f.addrs[0] {
		t.Errorf("first result is %q; want %q", doc.Results[0].Result.Email, f.addrs[0])
	}
	s := buf.String()
	for _, secret := range []string{"hash-" + f.id, "secret-of-" + f.id, other.email, other.addrs[0], "key_hash", "password_hash"} {
		if strings.Contains(s, secret) {
			t.Errorf("the export carries %q", secret)
		}
	}
	// Capped: past the limit a section is cut and named.
	buf.Reset()
	pgtest.Must(t, export(ctx, pool, f.id, &buf, 1), "export capped")
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("capped export: %v", err)
	}
	if len(doc.Jobs) != 1 || strings.Join(doc.Truncated, ",") != "jobs,deliveries,results" {
		t.Errorf("capped export: %d jobs, truncated %v", len(doc.Jobs), doc.Truncated)
	}
	if err := Export(ctx, pool, uuid.NewString(), &buf); !errors.Is(err, ErrNotFound) {
		t.Errorf("export of no account: %v", err)
	}
}

func TestDeleteHistoryRemovesThatAddressOnly(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "dsr", time.Now())
	other := seed(t, pool, "dsr2", time.Now())
	// The other account verified the same address: its data is its own and stays.
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route, snapshot) VALUES ($1, 'o-1', 'verify', jsonb_build_object('email', $2::text))`,
		other.id, f.addrs[0])
	d, err := DeleteHistory(ctx, pool, f.id, "  "+strings.ToUpper(f.addrs[0])+" ", historyEvent(f.id))
	if err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	if d != (HistoryDeleted{Results: 1, Jobs: 1, Deliveries: 1, ListRows: 1}) {
		t.Errorf("DeleteHistory removed %+v; want one of each", d)
	}
	hits := findEverywhere(t, pool, f.addrs[0])
	// What is left of the address: the other account's row.
	want := "usage_log.snapshot"
	if strings.Join(hits, " ") != want {
		t.Errorf("after DeleteHistory the address is in %v; want only %s", hits, want)
	}
	var n int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND snapshot->>'email' = $2`, other.id, f.addrs[0]).Scan(&n), "other")
	if n != 1 {
		t.Error("the other account's result of the same address was removed")
	}
	if hits := findEverywhere(t, pool, f.addrs[1]); len(hits) == 0 {
		t.Error("the account's other address was removed")
	}
	// Nothing left: a second request removes nothing.
	if d, err := DeleteHistory(ctx, pool, f.id, f.addrs[0], historyEvent(f.id)); err != nil || d != (HistoryDeleted{}) {
		t.Errorf("second DeleteHistory: %+v, %v", d, err)
	}
}

// byTest is the audit event of the tests' deletions: no person acted.
var byTest = audit.Event{ActorType: audit.ActorSystem, Actor: "privacy test"}

// A deletion while the account's holds are being billed waits for the bill instead of
// deadlocking with it: both lock the holds in id order. The holds are written so that the
// table's order is the reverse of their ids', which is the order a plain DELETE would lock them.
func TestDeleteAccountWaitsForABillInsteadOfDeadlocking(t *testing.T) {
	pool := pgtest.New(t)
	ctx := context.Background()
	// One attempt: a deadlock fails the deletion here rather than being run again unseen.
	attempts := deleteAttempts
	deleteAttempts = 1
	t.Cleanup(func() { deleteAttempts = attempts })
	f := seed(t, pool, "billing", time.Now())
	pgtest.Exec(t, pool, `DELETE FROM usage_holds WHERE account_id = $1`, f.id)
	low, high := "00000000-0000-4000-8000-000000000001", "ffffffff-ffff-4fff-bfff-ffffffffffff"
	for _, h := range []string{high, low} {
		pgtest.Exec(t, pool, `INSERT INTO usage_holds (id, account_id, month, units, free) VALUES ($1, $2, date_trunc('month', now())::date, 1, true)`, h, f.id)
	}
	// The bill: it locks the lower id first ...
	bill, err := pool.Begin(ctx)
	pgtest.Must(t, err, "begin")
	defer bill.Rollback(ctx)
	_, err = bill.Exec(ctx, `SELECT 1 FROM usage_holds WHERE id = $1 FOR UPDATE`, low)
	pgtest.Must(t, err, "bill locks the first hold")
	deleted := make(chan error, 1)
	go func() { deleted <- DeleteAccount(ctx, pool, f.id, byTest) }()
	// ... the deletion starts and waits on it ...
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%usage_holds%')`).Scan(&waiting), "waiting")
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deletion never waited for the bill's lock")
		}
	}
	// ... and the bill takes its second hold and, for its usage rows' foreign key, the key: with
	// the deletion holding either, one of the two would be chosen as a deadlock's victim within
	// deadlock_timeout (1 s).
	_, err = bill.Exec(ctx, `UPDATE usage_holds SET units = 0 WHERE id = $1`, high)
	pgtest.Must(t, err, "bill takes the second hold")
	_, err = bill.Exec(ctx, `SELECT 1 FROM api_keys WHERE account_id = $1 FOR KEY SHARE`, f.id)
	pgtest.Must(t, err, "bill's foreign key check on the key")

	pgtest.Must(t, bill.Commit(ctx), "bill commits")
	select {
	case err := <-deleted:
		pgtest.Must(t, err, "deletion after the bill")
	case <-time.After(20 * time.Second):
		t.Fatal("the deletion did not finish")
	}
	var holds int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM usage_holds WHERE account_id = $1`, f.id).Scan(&holds), "holds")
	if holds != 0 {
		t.Errorf("%d holds left", holds)
	}
}

// The deletion's first step revokes the keys and clears their labels but leaves the rows they
// made alone: deleting a key would set key_id to NULL on each of them inside that one
// transaction, however many there are. Erase deletes the keys once those rows are gone.
func TestDeletionRevokesKeysAndErasesThemLast(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "keys", time.Now())
	pgtest.Must(t, deleteOnce(ctx, pool, f.id, byTest), "first step")
	var active, labelled, made int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE revoked_at IS NULL), count(*) FILTER (WHERE label <> '')
		FROM api_keys WHERE account_id = $1`, f.id).Scan(&active, &labelled), "keys")
	if active != 0 || labelled != 0 {
		t.Errorf("after the first step: %d keys active, %d with a label", active, labelled)
	}
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM usage_log WHERE account_id = $1 AND key_id IS NOT NULL`, f.id).Scan(&made), "usage rows")
	if made == 0 {
		t.Error("the first step touched the usage rows' key_id")
	}
	_, done, err := Erase(ctx, pool, f.id, -1)
	pgtest.Must(t, err, "erase")
	var keys int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE account_id = $1`, f.id).Scan(&keys), "keys")
	if !done || keys != 0 {
		t.Errorf("after Erase: done %v, %d keys left", done, keys)
	}
}

// A job whose data retention already removed (MAILVET_JOB_RETENTION shorter than the delivery
// log's 30 days, or a callback that was retried for a while) still has its callback body, with
// the address, in the delivery log: a history deletion of that address removes it too.
func TestDeleteHistoryReachesTheCallbacksOfExpiredJobs(t *testing.T) {
	pool := pgtest.New(t)
	start := time.Now().Add(-3 * time.Hour)
	f := seed(t, pool, "late", start)
	pgtest.Exec(t, pool, `UPDATE accounts SET tier = 'builder' WHERE id = $1`, f.id) // 30 days of delivery log
	p, err := Purge(ctx, pool, time.Now(), Retention{Results: 30 * 24 * time.Hour, Jobs: time.Hour}, 1000, 10)
	if err != nil || p.Jobs != 2 {
		t.Fatalf("Purge: %+v, %v; want both jobs expired", p, err)
	}
	if hits := findEverywhere(t, pool, f.addrs[0]); !strings.Contains(strings.Join(hits, " "), "deliveries.body") {
		t.Fatalf("precondition: the expired job's callback body should still hold the address; it is in %v", hits)
	}
	d, err := DeleteHistory(ctx, pool, f.id, f.addrs[0], historyEvent(f.id))
	if err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	if d.Deliveries != 1 {
		t.Errorf("DeleteHistory removed %d deliveries; want the expired job's callback", d.Deliveries)
	}
	for _, h := range findEverywhere(t, pool, f.addrs[0]) {
		if h != "idempotency_keys.body" { // expires within the day (docs/personal-data.md)
			t.Errorf("after DeleteHistory the address is still in %s", h)
		}
	}
	if hits := findEverywhere(t, pool, f.addrs[1]); !strings.Contains(strings.Join(hits, " "), "deliveries.body") {
		t.Errorf("the other address's callback went too: %v", hits)
	}
}

// An address with an internationalised domain is stored in two forms: a job and a list keep it
// as the customer sent it (U-labels), the verification's result, its snapshot and its callback
// in the form the result names (A-labels, docs/api.md "The verify result"). Asked in either
// form, a history deletion finds both.
func TestDeleteHistoryFindsBothFormsOfAnInternationalAddress(t *testing.T) {
	for _, asked := range []string{"Jürgen@Müller.example", "jürgen@xn--mller-kva.example"} {
		t.Run(asked, func(t *testing.T) {
			pool := pgtest.New(t)
			f := seed(t, pool, "idn", time.Now())
			sent, result := "jürgen@müller.example", "jürgen@xn--mller-kva.example"
			snap := fmt.Sprintf(`{"email":%q,"status":"deliverable"}`, result)
			job := uuid.New()
			pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route, email_domain, snapshot)
				VALUES ($1, $2, 'verify_async', 'xn--mller-kva.example', $3)`, f.id, "job:"+job.String(), snap)
			pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, result, completed_at)
				VALUES ($1, $2, $3, 'https://hooks.example/', 'completed', $4, now())`, job, f.id, sent, snap)
			pgtest.Exec(t, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, finished_at)
				VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example/', convert_to($3::text, 'UTF8'), 'delivered', now())`, job, f.id, snap)
			pgtest.Exec(t, pool, `INSERT INTO list_rows (list_id, row_no, email, cols) VALUES ($1, 9, $2, $3)`, f.list, sent, []string{sent, "Jürgen"})
			pgtest.Exec(t, pool, `INSERT INTO list_addresses (list_id, email, idx, chunk, status, result)
				VALUES ($1, $2, 9, 0, 'deliverable', $3)`, f.list, sent, snap)

			d, err := DeleteHistory(ctx, pool, f.id, asked, historyEvent(f.id))
			if err != nil {
				t.Fatalf("DeleteHistory: %v", err)
			}
			if d != (HistoryDeleted{Results: 1, Jobs: 1, Deliveries: 1, ListRows: 1}) {
				t.Errorf("DeleteHistory(%q) removed %+v; want one of each", asked, d)
			}
			for _, needle := range []string{sent, result} {
				if hits := findEverywhere(t, pool, needle); len(hits) > 0 {
					t.Errorf("after DeleteHistory(%q), %s is still in %v", asked, needle, hits)
				}
			}
		})
	}
}

// An address sent with its accents decomposed (u and a combining diaeresis, as some keyboards and
// exports write it) is found when the subject asks with them composed, and the other way round.
func TestDeleteHistoryFindsEitherUnicodeNormalisation(t *testing.T) {
	nfc, nfd := "jürgen@müller.example", "ju\u0308rgen@mu\u0308ller.example"
	for _, c := range []struct{ sent, asked string }{{nfd, nfc}, {nfc, nfd}} {
		t.Run(fmt.Sprintf("sent %+q", c.sent), func(t *testing.T) {
			pool := pgtest.New(t)
			f := seed(t, pool, "nfd", time.Now())
			job := uuid.New()
			pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, completed_at)
				VALUES ($1, $2, $3, 'https://hooks.example/', 'completed', now())`, job, f.id, c.sent)
			pgtest.Exec(t, pool, `INSERT INTO list_rows (list_id, row_no, email, cols) VALUES ($1, 9, $2, $3)`, f.list, c.sent, []string{c.sent})
			d, err := DeleteHistory(ctx, pool, f.id, c.asked, historyEvent(f.id))
			if err != nil {
				t.Fatalf("DeleteHistory: %v", err)
			}
			if d.Jobs != 1 || d.ListRows != 1 {
				t.Errorf("DeleteHistory(%+q) removed %+v; want the job and the list row sent as %+q", c.asked, d, c.sent)
			}
			if hits := findEverywhere(t, pool, c.sent); len(hits) > 0 {
				t.Errorf("%+q is still in %v", c.sent, hits)
			}
		})
	}
}

// The local part of a result keeps its case (docs/api.md, "The verify result"), and a job keeps
// the address as sent: a database created with the plain C locale (LC_CTYPE=C) folds only ASCII
// letters in lower(), so a deletion that folded there would miss ÉMILE when asked for émile. The
// deletion folds as Go does, whatever the database's locale.
func TestDeleteHistoryFoldsCaseWhateverTheDatabaseLocale(t *testing.T) {
	pool := pgtest.Pool(t, pgtest.LocaleURL(t, "C"))
	var folded string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT lower('ÉMILE')`).Scan(&folded), "lower")
	if folded != "Émile" {
		t.Fatalf("precondition: lower('ÉMILE') is %q in this database; want the C locale's \"Émile\"", folded)
	}
	f := seed(t, pool, "c", time.Now())
	sent, asked := "ÉMILE.KÖNIG@Exemple.FR", "émile.könig@exemple.fr"
	snap := fmt.Sprintf(`{"email":%q,"status":"deliverable"}`, "ÉMILE.KÖNIG@exemple.fr")
	job, expired := uuid.New(), uuid.New()
	pgtest.Exec(t, pool, `INSERT INTO usage_log (account_id, item_key, route, email_domain, snapshot)
		VALUES ($1, $2, 'verify_async', 'exemple.fr', $3)`, f.id, "job:"+job.String(), snap)
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, result, completed_at)
		VALUES ($1, $2, $3, 'https://hooks.example/', 'completed', $4, now())`, job, f.id, sent, snap)
	// A job retention already expired, whose callback is still in the delivery log.
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, completed_at, expired_at)
		VALUES ($1, $2, '', 'https://hooks.example/', 'completed', now(), now())`, expired, f.id)
	for _, j := range []uuid.UUID{job, expired} {
		pgtest.Exec(t, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, finished_at)
			VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example/', convert_to($3::text, 'UTF8'), 'delivered', now())`, j, f.id, snap)
	}
	// A list keeps the cell as uploaded and its address as list.Normalize folded it.
	pgtest.Exec(t, pool, `INSERT INTO list_rows (list_id, row_no, email, cols) VALUES ($1, 9, $2, $3)`, f.list, asked, []string{sent})
	pgtest.Exec(t, pool, `INSERT INTO list_addresses (list_id, email, idx, chunk, status, result)
		VALUES ($1, $2, 9, 0, 'deliverable', $3)`, f.list, asked, snap)

	d, err := DeleteHistory(ctx, pool, f.id, asked, historyEvent(f.id))
	if err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	if want := (HistoryDeleted{Results: 1, Jobs: 1, Deliveries: 2, ListRows: 1}); d != want {
		t.Errorf("DeleteHistory(%q) removed %+v; want %+v", asked, d, want)
	}
	// Find compares with the database's lower() too, so it is asked for each stored form.
	for _, needle := range []string{sent, "ÉMILE.KÖNIG@exemple.fr", asked} {
		if hits := findEverywhere(t, pool, needle); len(hits) > 0 {
			t.Errorf("after DeleteHistory(%q), %q is still in %v", asked, needle, hits)
		}
	}
	if hits := findEverywhere(t, pool, f.addrs[1]); len(hits) == 0 {
		t.Error("another address of the account went too")
	}
}

// The callbacks of expired jobs are matched in the database: a deletion does not read the
// bodies of the account's other expired jobs (BenchmarkDeleteHistoryExpiredCallbacks,
// BENCHMARKS.md), and still finds the one that holds the address, in another case.
func BenchmarkDeleteHistoryExpiredCallbacks(b *testing.B) {
	for _, unrelated := range []int{1_000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("unrelated=%d", unrelated), func(b *testing.B) {
			pool := pgtest.New(b)
			account := uuid.NewString()
			pgtest.Exec(b, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'builder', 'bench@owner.example')`, account)
			// A callback body the size of a real result (docs/api.md, "The verify result").
			body := func(email string) string {
				return fmt.Sprintf(`{"email":%q,"valid":false,"status":"undeliverable","confidence":0.95,"failed_check":"smtp",`+
					`"disposable":false,"role":false,"free_provider":false,"catch_all":false,"smtp_blocked":false,"mx_found":true,`+
					`"mx_host":"mx1.acme.example","suggestion":null,"latency_ms":412,"reason":"mailbox_unknown",`+
					`"smtp_reply":{"code":550,"enhanced_code":"5.1.1","text":"The email account that you tried to reach does not exist."}}`, email)
			}
			for done := 0; done < unrelated; done += 2_000 { // in statements the pool's deadline allows
				pgtest.Exec(b, pool, `WITH j AS (
						INSERT INTO jobs (id, account_id, email, webhook_url, state, completed_at, expired_at)
						SELECT gen_random_uuid(), $1, '', 'https://hooks.example/', 'completed', now(), now() FROM generate_series(1, $2)
						RETURNING id)
					INSERT INTO deliveries (id, job_id, account_id, url, body, state, finished_at)
					SELECT gen_random_uuid(), j.id, $1, 'https://hooks.example/', convert_to(replace($3::text, '#', j.id::text), 'UTF8'), 'delivered', now()
					FROM j`, account, min(2_000, unrelated-done), body("someone.#@acme.example"))
			}
			target := uuid.New()
			pgtest.Exec(b, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, completed_at, expired_at)
				VALUES ($1, $2, '', 'https://hooks.example/', 'completed', now(), now())`, target, account)
			pgtest.Exec(b, pool, `ANALYZE`)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				pgtest.Exec(b, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, finished_at)
					VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example/', convert_to($3::text, 'UTF8'), 'delivered', now())`,
					target, account, body("Ann.Target@acme.example"))
				b.StartTimer()
				d, err := DeleteHistory(ctx, pool, account, "ann.target@acme.example", historyEvent(account))
				if err != nil || d.Deliveries != 1 {
					b.Fatalf("DeleteHistory: %+v, %v; want the target's callback", d, err)
				}
			}
		})
	}
}

// The callbacks of expired jobs are matched in the database, on the body's email field whatever
// the body looks like: as the verifier encodes a result (verdict.Result, email first), with the
// address JSON-escaped (& is \u0026 in Go's encoding), or with the email elsewhere in the body.
// Callbacks of other addresses, one of them a longer address that starts with the same bytes,
// stay.
func TestDeleteHistoryMatchesExpiredCallbacksOnTheEmailField(t *testing.T) {
	pool := pgtest.New(t)
	f := seed(t, pool, "cb", time.Now())
	encoded := func(email string) string {
		b, err := json.Marshal(verdict.Result{Email: email, Status: verdict.StatusDeliverable})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		asked, body string
		match       bool
	}{
		{"ann.x@acme.example", encoded("Ann.X@acme.example"), true},
		{"ann&co@acme.example", encoded("ANN&Co@acme.example"), true},
		{`"ann\"q"@acme.example`, encoded(`"Ann\"Q"@acme.example`), true},
		{"ann.y@acme.example", `{"status":"deliverable","smtp_reply":{"text":"{\"email\":\"x\"}"},"email":" Ann.Y@acme.example"}`, true},
		{"ann.z@acme.example", encoded("ann.z@acme.example.org"), false},
		{"ann.z@acme.example", `{"email":"ann.z@acme.example.org","status":"deliverable"}`, false},
	}
	for _, c := range cases {
		job := uuid.New()
		pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state, completed_at, expired_at)
			VALUES ($1, $2, '', 'https://hooks.example/', 'completed', now(), now())`, job, f.id)
		pgtest.Exec(t, pool, `INSERT INTO deliveries (id, job_id, account_id, url, body, state, finished_at)
			VALUES (gen_random_uuid(), $1, $2, 'https://hooks.example/', convert_to($3::text, 'UTF8'), 'failed', now())`, job, f.id, c.body)
	}
	for _, c := range cases {
		before := countDeliveries(t, pool, f.id)
		d, err := DeleteHistory(ctx, pool, f.id, c.asked, historyEvent(f.id))
		if err != nil {
			t.Fatalf("DeleteHistory(%q): %v", c.asked, err)
		}
		want := int64(0)
		if c.match {
			want = 1
		}
		if d.Deliveries != want || countDeliveries(t, pool, f.id) != before-want {
			t.Errorf("DeleteHistory(%q) with the callback %s removed %d deliveries; want %d", c.asked, c.body, d.Deliveries, want)
		}
	}
}

func countDeliveries(t *testing.T, pool *pgxpool.Pool, account string) int64 {
	t.Helper()
	var n int64
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE account_id = $1`, account).Scan(&n), "count deliveries")
	return n
}

// historyEvent is the event of a history deletion asked for by a standard key of account.
func historyEvent(account string) audit.Event {
	return audit.Event{AccountID: account, ActorType: audit.ActorKey, Actor: "sk_live_test…test",
		Kind: audit.HistoryDeleted, Outcome: audit.Success}
}

// A job's callback URL can carry the receiver's token (in its path or query). Once the job has
// expired, by retention or by a history deletion, nothing reads the URL any more (the delivery
// log keeps its own copy for its own retention), so it goes with the email, the result and the
// secret (docs/personal-data.md, "Where it is stored").
func TestAnExpiredJobKeepsNoCallbackURL(t *testing.T) {
	pool := pgtest.New(t)
	start := time.Now()
	f := seed(t, pool, "hookurl", start)
	hook := "https://hooks.example/services/T0/B0/token-" + f.id + "?sig=query-" + f.id
	pgtest.Exec(t, pool, `UPDATE jobs SET webhook_url = $2 WHERE account_id = $1`, f.id, hook)
	urls := func(job uuid.UUID) (url string) {
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT webhook_url FROM jobs WHERE id = $1`, job).Scan(&url), "job")
		return url
	}

	// History deletion of the first address.
	if _, err := DeleteHistory(ctx, pool, f.id, f.addrs[0], historyEvent(f.id)); err != nil {
		t.Fatalf("DeleteHistory: %v", err)
	}
	if u := urls(f.jobs[0]); u != "" {
		t.Errorf("after DeleteHistory the job keeps its callback URL %q", u)
	}
	if u := urls(f.jobs[1]); u != hook {
		t.Errorf("the other address's job lost its callback URL: %q", u)
	}

	// Retention of the second.
	if _, err := Purge(ctx, pool, start.Add(31*24*time.Hour), Defaults(), 1000, 10); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if u := urls(f.jobs[1]); u != "" {
		t.Errorf("after its retention the job keeps its callback URL %q", u)
	}
}

// Every timestamp of an export is ISO 8601 in UTC to the second, as everywhere in the API
// (docs/api.md, "Conventions"), whatever time zone the database session uses: an operator's
// server set to another zone must not leak its offset or Postgres's microseconds into the file.
func TestExportTimestampsAreUTCToTheSecond(t *testing.T) {
	u := pgtest.URL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	pool := pgtest.Pool(t, u+sep+"timezone=Asia/Kolkata")
	var zone string
	pgtest.Must(t, pool.QueryRow(ctx, `SHOW TimeZone`).Scan(&zone), "show TimeZone")
	if zone != "Asia/Kolkata" {
		t.Fatalf("precondition: the session's time zone is %q", zone)
	}
	f := seed(t, pool, "tz", time.Now().Add(-time.Hour))
	var buf bytes.Buffer
	pgtest.Must(t, Export(ctx, pool, f.id, &buf), "Export")
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	utcSecond := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$`)
	checked := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && (strings.HasSuffix(k, "_at")) && path != "$.results[].result" {
					checked++
					if !utcSecond.MatchString(s) {
						t.Errorf("%s.%s = %q; want UTC to the second (2026-11-22T03:04:05Z)", path, k, s)
					}
					continue
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("$", doc)
	if checked < 10 {
		t.Fatalf("only %d timestamps checked in %s", checked, buf.String())
	}
}
