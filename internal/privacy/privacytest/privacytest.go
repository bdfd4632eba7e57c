// Package privacytest finds a value anywhere in the database or in the messages NATS JetStream
// stores, for the tests that check a deletion left nothing behind (docs/personal-data.md).
package privacytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// Find returns "table.column" for every column of every table of the public schema that holds
// needle: text, jsonb and arrays compared as text in any case, bytea as its bytes, and uuid
// columns by equality when needle is a UUID. Every table is read, so a table added later is
// searched too.
func Find(t testing.TB, pool *pgxpool.Pool, needle string) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' AND c.table_name <> 'goose_db_version'
		ORDER BY 1, 2`)
	pgtest.Must(t, err, "columns")
	type column struct{ table, name, typ string }
	var cols []column
	for rows.Next() {
		var c column
		pgtest.Must(t, rows.Scan(&c.table, &c.name, &c.typ), "scan column")
		cols = append(cols, c)
	}
	rows.Close()
	var hits []string
	for _, c := range cols {
		var cond string
		switch c.typ {
		case "text", "character varying", "jsonb", "json", "ARRAY":
			cond = fmt.Sprintf(`strpos(lower(%q::text), lower($1)) > 0`, c.name)
		case "bytea":
			cond = fmt.Sprintf(`position(convert_to($1::text, 'UTF8') in %q) > 0`, c.name)
		case "uuid":
			if uuid.Validate(needle) != nil {
				continue
			}
			cond = fmt.Sprintf(`%q = $1::uuid`, c.name)
		default:
			continue
		}
		var n int
		pgtest.Must(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q WHERE %s`, c.table, cond), needle).Scan(&n),
			"search "+c.table+"."+c.name)
		if n > 0 {
			hits = append(hits, c.table+"."+c.name)
		}
	}
	return hits
}

// maxStreamMessages bounds how many stored messages FindInStreams reads of each stream.
const maxStreamMessages = 100_000

// FindInStreams returns "stream#sequence" for every message that any JetStream stream of js
// still stores (the key-value buckets included: they are streams too) whose subject, headers or
// data hold needle, compared in any case.
func FindInStreams(t testing.TB, js jetstream.JetStream, needle string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := bytes.ToLower([]byte(needle))
	var hits []string
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		pgtest.Must(t, err, "stream "+name)
		info, err := s.Info(ctx)
		pgtest.Must(t, err, "stream info "+name)
		first, last := info.State.FirstSeq, info.State.LastSeq
		for seq := first; seq <= last && seq < first+maxStreamMessages && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // acknowledged (a work queue) or deleted
			}
			pgtest.Must(t, err, fmt.Sprintf("message %s#%d", name, seq))
			stored := bytes.ToLower(append(append([]byte(m.Subject), m.Data...), []byte(fmt.Sprint(m.Header))...))
			if bytes.Contains(stored, want) {
				hits = append(hits, fmt.Sprintf("%s#%d", name, seq))
			}
		}
	}
	pgtest.Must(t, names.Err(), "stream names")
	return hits
}
