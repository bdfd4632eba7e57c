package api

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/sealed"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// openSecret opens a sealed webhook secret as the webhook worker would, with the server's keys.
func (b *testBundle) openSecret(v string) string {
	b.t.Helper()
	if !sealed.IsSealed(v) {
		b.t.Errorf("stored webhook secret is not sealed")
		return ""
	}
	plain, err := sealed.Or(b.cfg.Secrets).Open(v)
	if err != nil {
		b.t.Errorf("open a stored webhook secret: %v", err)
	}
	return plain
}

// A copy of the database alone must sign nothing (docs/reliability.md, "Webhook secrets at
// rest"): after a job and a list are created with webhook secrets, and after they finished and
// their deliveries exist, no row of any table holds a secret in plain text or in hex. Each row
// is read whole as text (row::text), so every column of every type is searched, bytea in its hex
// form too. The sealed values are there and open to the secrets, so the search is not vacuous.
func TestDatabaseDumpHoldsNoWebhookSecret(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_SECRETS_KEY": strings.Repeat("ab", sealed.KeySize)}})
	if !b.cfg.SecretsKeySet {
		t.Fatal("the test server has no MAILVET_SECRETS_KEY")
	}
	acct, key := b.customer(plan.Builder)
	jobSecret, listSecret := "job-secret-Zq7v1", "list-secret-Kp3m9"

	r := b.verify(key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/mailvet", "webhook_secret": jobSecret}).
		want(t, http.StatusAccepted, "")
	jobID, _ := r.body["job_id"].(string)
	l := b.call(http.MethodPost, "/v1/email/lists?webhook_url=https://hooks.example.com/lists", key, "email\nbob@acme.test\n",
		"Content-Type", "text/csv", "Mailvet-Webhook-Secret", listSecret).want(t, http.StatusAccepted, "")
	listID, _ := l.body["id"].(string)
	assertNoPlainSecret(t, b, jobSecret, listSecret) // as created (the job may have finished already)

	deadline := time.Now().Add(30 * time.Second)
	for b.count(`SELECT count(*) FROM deliveries WHERE job_id = $1 OR list_id = $2`, jobID, listID) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the job's and the list's deliveries were not created")
		}
		time.Sleep(50 * time.Millisecond)
	}
	assertNoPlainSecret(t, b, jobSecret, listSecret)

	// The secrets are still there for the webhook worker, sealed on the deliveries only.
	for subject, want := range map[string]string{"job_id": jobSecret, "list_id": listSecret} {
		id := jobID
		if subject == "list_id" {
			id = listID
		}
		var v string
		pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT webhook_secret FROM deliveries WHERE `+subject+` = $1`, id).Scan(&v), "sealed secret")
		if !strings.HasPrefix(v, "mvs1:"+b.cfg.Secrets.CurrentID()+":") || b.openSecret(v) != want {
			t.Errorf("%s delivery's secret %q does not open to its secret", subject, v)
		}
	}
	// The list still says it was given a secret, once its own copy is gone.
	l2, err := b.srv.lists.Get(context.Background(), acct, uuid.MustParse(listID))
	if err != nil || !l2.HasWebhookSecret {
		t.Errorf("list after its callback exists: HasWebhookSecret %v (%v)", l2.HasWebhookSecret, err)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE webhook_secret IS NOT NULL`) + b.count(`SELECT count(*) FROM lists WHERE webhook_secret IS NOT NULL`); n != 0 {
		t.Errorf("%d finished jobs or lists keep their secret", n)
	}
}

// assertNoPlainSecret reads every row of every table of the database as text and fails if one
// holds any of secrets, as text or as the hex that bytea columns print.
func assertNoPlainSecret(t *testing.T, b *verifyBundle, secrets ...string) {
	t.Helper()
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
	pgtest.Must(t, err, "tables")
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	pgtest.Must(t, err, "tables")
	if len(tables) < 10 {
		t.Fatalf("only %d tables found: %v", len(tables), tables)
	}
	for _, table := range tables {
		for _, s := range secrets {
			var n int
			pgtest.Must(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0`,
				s, hex.EncodeToString([]byte(s))).Scan(&n), "search "+table)
			if n > 0 {
				t.Errorf("table %s: %d rows hold a webhook secret in plain text", table, n)
			}
		}
	}
}
