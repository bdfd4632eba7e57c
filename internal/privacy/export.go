package privacy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/listlive"
)

// ExportLimit is the most entries of each list of an export (jobs, lists, deliveries, results,
// usage months). An export past it names the list in "truncated" (docs/personal-data.md,
// "Export"); the API's list and delivery routes page through all of them.
const ExportLimit = 100_000

// exportTimeout bounds an export: at most ExportLimit rows of each section, streamed.
const exportTimeout = 10 * time.Minute

// utc is the SQL for timestamptz column col as the API writes every timestamp: ISO 8601 in UTC, to
// the second (docs/api.md, "Conventions"), whatever the session's TimeZone; NULL stays null.
func utc(col string) string {
	return `to_char(` + col + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`
}

// exportSections are the lists of an export, in order, each one query whose rows are JSON
// objects. None reads a password hash, a key hash, a webhook secret or a signed body. A bulk list
// past its expires_at is left out with its callbacks' deliveries, which its purge deletes with it:
// it is gone for its account from that moment (listlive; docs/lists.md, "States").
var exportSections = []struct{ name, sql string }{
	{"users", `SELECT jsonb_build_object('id', id, 'email', email, 'created_at', ` + utc("created_at") + `, 'updated_at', ` + utc("updated_at") + `)
		FROM dashboard_users WHERE account_id = $1 ORDER BY created_at, id LIMIT $2`},
	{"keys", `SELECT jsonb_build_object('id', id, 'kind', kind, 'mode', mode, 'label', label, 'prefix', prefix,
			'created_at', ` + utc("created_at") + `, 'revoked_at', ` + utc("revoked_at") + `)
		FROM api_keys WHERE account_id = $1 ORDER BY created_at, id LIMIT $2`},
	{"jobs", `SELECT jsonb_build_object('job_id', id, 'status', state, 'email', nullif(email, ''),
			'webhook_url', nullif(webhook_url, ''), 'result', result, 'created_at', ` + utc("created_at") + `,
			'completed_at', ` + utc("completed_at") + `, 'expired_at', ` + utc("expired_at") + `, 'sandbox', sandbox)
		FROM jobs WHERE account_id = $1 ORDER BY created_at, id LIMIT $2`},
	{"lists", `SELECT jsonb_build_object('id', id, 'name', name, 'format', format, 'columns', columns,
			'status', state, 'rows', rows, 'unique_addresses', unique_addresses, 'verified', verified,
			'webhook_url', webhook_url, 'created_at', ` + utc("created_at") + `, 'finished_at', ` + utc("finished_at") + `,
			'expires_at', ` + utc("expires_at") + `, 'sandbox', sandbox)
		FROM lists WHERE account_id = $1 AND ` + list.Live("lists") + ` ORDER BY created_at, id LIMIT $2`},
	{"deliveries", `SELECT jsonb_build_object('id', id, 'job_id', job_id, 'list_id', list_id, 'url', url,
			'status', state, 'attempts', attempts, 'last_status', last_status, 'created_at', ` + utc("created_at") + `,
			'finished_at', ` + utc("finished_at") + `)
		FROM deliveries WHERE account_id = $1
			AND ` + listlive.OfLive("deliveries.list_id") + `
		ORDER BY created_at, id LIMIT $2`},
	{"results", `SELECT jsonb_build_object('occurred_at', ` + utc("occurred_at") + `, 'route', route, 'result', snapshot)
		FROM usage_log WHERE account_id = $1 AND snapshot IS NOT NULL ORDER BY occurred_at, id LIMIT $2`},
	{"usage", `SELECT jsonb_build_object('month', to_char(month, 'YYYY-MM'), 'billable', billable, 'quota_units', quota_units)
		FROM usage_monthly WHERE account_id = $1 ORDER BY month LIMIT $2`},
}

// Export writes account's data to w as one JSON object (docs/personal-data.md, "Export"): the
// account, then each section of exportSections, then "truncated", the sections cut at
// ExportLimit. It reads in one read-only snapshot and streams row by row, so it holds one row
// in memory whatever the account's size. ErrNotFound comes before anything is written; an
// error later leaves w with a cut-off document, which the caller can only abort.
func Export(ctx context.Context, db database.DB, account string, w io.Writer) error {
	return export(ctx, db, account, w, ExportLimit)
}

func export(ctx context.Context, db database.DB, account string, w io.Writer, limit int) error {
	ctx, cancel := withBudget(ctx, exportTimeout)
	defer cancel()
	tx, err := beginSnapshot(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var head []byte
	err = tx.QueryRow(ctx, `SELECT jsonb_build_object('account_id', id, 'email', email, 'tier', tier,
			'subscription_status', subscription_status, 'stripe_customer_id', stripe_customer_id,
			'hard_cap_eur', hard_cap_eur, 'created_at', `+utc("created_at")+`)
		FROM accounts WHERE id = $1 AND deleted_at IS NULL`, account).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"exported_at":"` + time.Now().UTC().Format(time.RFC3339) + `","account":`)
	bw.Write(head)
	var truncated []string
	for _, s := range exportSections {
		bw.WriteString(`,"` + s.name + `":[`)
		rows, err := tx.Query(ctx, s.sql, account, limit+1)
		if err != nil {
			return fmt.Errorf("export %s: %w", s.name, err)
		}
		n := 0
		for rows.Next() {
			if n == limit {
				truncated = append(truncated, s.name)
				break
			}
			var doc []byte
			if err := rows.Scan(&doc); err != nil {
				rows.Close()
				return fmt.Errorf("export %s: %w", s.name, err)
			}
			if n > 0 {
				bw.WriteByte(',')
			}
			bw.Write(doc)
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("export %s: %w", s.name, err)
		}
		bw.WriteByte(']')
	}
	bw.WriteString(`,"truncated":[`)
	for i, s := range truncated {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString(`"` + s + `"`)
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// beginSnapshot opens a read-only transaction that sees one snapshot of the database, so the
// sections of an export agree with each other.
func beginSnapshot(ctx context.Context, db database.DB) (pgx.Tx, error) {
	if b, ok := db.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		return b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	}
	return db.Begin(ctx) // already inside a transaction: its snapshot
}
