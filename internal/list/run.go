package list

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/webhook"
)

// Chunk names one work message: a list and the number of one of its chunks. It is the LISTS
// stream's message body as it is.
type Chunk = queue.ChunkMessage

// Start starts the account's queued lists, oldest first, while it has fewer than MaxRunning
// running, and returns the chunks it handed out, for the caller to publish. Calling it for a list
// that cannot start yet is harmless: it starts when another of its account's lists finishes.
func (s *Store) Start(ctx context.Context, account uuid.UUID) ([]Chunk, error) {
	var started []Chunk
	err := s.tx(ctx, func(tx pgx.Tx) (err error) {
		started, err = s.startNext(ctx, tx, account)
		return err
	})
	return started, err
}

// startNext is Start inside tx. An advisory lock per account makes concurrent starts (an upload,
// a list finishing, the sweep) count the running lists one at a time.
func (s *Store) startNext(ctx context.Context, tx pgx.Tx, account uuid.UUID) ([]Chunk, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7001))`, account); err != nil {
		return nil, err
	}
	var running int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM lists WHERE account_id = $1 AND state = $2`, account, Running).Scan(&running); err != nil {
		return nil, err
	}
	if running >= s.cfg.MaxRunning {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `UPDATE lists SET state = $2, started_at = now(), updated_at = now()
		WHERE id IN (SELECT id FROM lists WHERE account_id = $1 AND state = $3 ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
		RETURNING id`, account, Running, Queued, s.cfg.MaxRunning-running)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, err
	}
	var out []Chunk
	for _, id := range ids {
		cs, err := s.claim(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// claim hands out the list's next chunks, up to its window in flight.
func (s *Store) claim(ctx context.Context, tx pgx.Tx, id uuid.UUID) ([]Chunk, error) {
	var was, now int
	err := tx.QueryRow(ctx, `WITH old AS (SELECT next_chunk AS was FROM lists WHERE id = $1)
		UPDATE lists l SET next_chunk = greatest(l.next_chunk, least(l.chunks, l.done_chunks + $2)), updated_at = now()
		FROM old WHERE l.id = $1 AND l.state = $3 RETURNING old.was, l.next_chunk`, id, s.cfg.Window, Running).Scan(&was, &now)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]Chunk, 0, now-was)
	for n := was; n < now; n++ {
		out = append(out, Chunk{ListID: id, Chunk: n})
	}
	return out, nil
}

// Work is a chunk's addresses still to verify, with what writing their results needs.
type Work struct {
	State     State
	AccountID uuid.UUID
	KeyID     *uuid.UUID
	Addresses []Address
	// Sandbox: the list was uploaded with a sandbox key; its addresses are answered by the
	// sandbox, never probed, and its results are not billed (docs/sandbox.md).
	Sandbox bool
}

// Address is one unique address of a list.
type Address struct {
	Idx   int
	Email string
}

// Work returns the chunk's addresses that have no result yet (all of them, unless the chunk was
// redelivered after some were written) when the list is running; otherwise only its state.
func (s *Store) Work(ctx context.Context, c Chunk) (Work, error) {
	var w Work
	err := s.db.QueryRow(ctx, `SELECT state, account_id, key_id, sandbox FROM lists WHERE id = $1`, c.ListID).Scan(&w.State, &w.AccountID, &w.KeyID, &w.Sandbox)
	if err == pgx.ErrNoRows {
		return w, ErrNotFound
	}
	if err != nil || w.State != Running {
		return w, err
	}
	rows, err := s.db.Query(ctx, `SELECT idx, email FROM list_addresses WHERE list_id = $1 AND chunk = $2 AND result IS NULL ORDER BY idx`, c.ListID, c.Chunk)
	if err != nil {
		return w, err
	}
	w.Addresses, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Address, error) {
		var a Address
		return a, r.Scan(&a.Idx, &a.Email)
	})
	return w, err
}

// Running reports whether list id is still running; a deleted list is not.
func (s *Store) Running(ctx context.Context, id uuid.UUID) (bool, error) {
	var st State
	err := s.db.QueryRow(ctx, `SELECT state FROM lists WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return st == Running, err
}

// Written is what writing a chunk led to, for the caller to act on after the commit.
type Written struct {
	// Wrote is how many addresses got their result now (0 for a chunk already written, or for a
	// list no longer running, whose results are dropped unbilled).
	Wrote int
	// Next are chunks to publish: the list's next ones, or, when it finished, another list's.
	Next []Chunk
	// Delivery is the completion callback to publish, if the list finished and has a webhook.
	Delivery *uuid.UUID
	// Finished is set when this chunk completed the list.
	Finished bool
}

// Write stores a chunk's results (results[i] is w.Addresses[i]'s) in one transaction: the
// results of addresses that have none yet, the list's counts, their usage rows (item keys per
// list and address, so nothing is billed twice) and the list's progress; the last chunk completes
// the list, creates its callback and starts the account's next queued list. A list that is no
// longer running (canceled, deleted) takes nothing, and nothing is billed.
func (s *Store) Write(ctx context.Context, c Chunk, w Work, results []verdict.Result, publicURL string) (Written, error) {
	if len(results) != len(w.Addresses) {
		return Written{}, fmt.Errorf("write chunk: %d results for %d addresses", len(results), len(w.Addresses))
	}
	idxs := make([]int32, len(results))
	statuses, reasons := make([]string, len(results)), make([]string, len(results))
	docs := make([][]byte, len(results))
	byIdx := make(map[int]int, len(results))
	for i, r := range results {
		doc, err := json.Marshal(r)
		if err != nil {
			return Written{}, err
		}
		idxs[i], statuses[i], reasons[i], docs[i] = int32(w.Addresses[i].Idx), string(r.Status), string(r.Reason), doc
		byIdx[w.Addresses[i].Idx] = i
	}
	var out Written
	err := s.tx(ctx, func(tx pgx.Tx) error {
		st, err := lockList(ctx, tx, c.ListID, "")
		if err != nil || st.state != Running {
			return err
		}
		// Matched within the chunk (its index), so the plan does not depend on the statistics of
		// a table that was just filled.
		rows, err := tx.Query(ctx, `UPDATE list_addresses a SET status = u.status, reason = u.reason, result = u.result
			FROM unnest($3::int[], $4::text[], $5::text[], $6::jsonb[]) AS u(idx, status, reason, result)
			WHERE a.list_id = $1 AND a.chunk = $2 AND a.idx = u.idx AND a.result IS NULL
			RETURNING a.idx, a.email`, c.ListID, c.Chunk, idxs, statuses, reasons, docs)
		if err != nil {
			return err
		}
		written, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Address, error) {
			var a Address
			return a, r.Scan(&a.Idx, &a.Email)
		})
		if err != nil || len(written) == 0 {
			return err // a redelivered chunk already written: nothing to count again
		}
		out.Wrote = len(written)
		if err := count(ctx, tx, c.ListID, written, results, byIdx, w); err != nil {
			return err
		}
		var verified, unique int
		if err := tx.QueryRow(ctx, `UPDATE lists SET verified = verified + $2, done_chunks = done_chunks + 1, updated_at = now()
			WHERE id = $1 RETURNING verified, unique_addresses`, c.ListID, len(written)).Scan(&verified, &unique); err != nil {
			return err
		}
		if verified < unique {
			out.Next, err = s.claim(ctx, tx, c.ListID)
			return err
		}
		st.verified = verified
		if err := finish(ctx, tx, st, Completed, "", s.cfg); err != nil {
			return err
		}
		out.Finished = true
		if out.Delivery, err = s.callback(ctx, tx, c.ListID, "list.completed", publicURL); err != nil {
			return err
		}
		out.Next, err = s.startNext(ctx, tx, st.account)
		return err
	})
	if err != nil {
		return Written{}, fmt.Errorf("write list %s chunk %d: %w", c.ListID, c.Chunk, err)
	}
	return out, nil
}

// count adds the written addresses to the list's counts and bills their usage rows against the
// list's hold, in the chunk's transaction. The rows carry no snapshot: the results live with the
// list, and go with it when it is deleted.
func count(ctx context.Context, tx pgx.Tx, id uuid.UUID, written []Address, results []verdict.Result, byIdx map[int]int, w Work) error {
	type key struct{ status, reason string }
	counts := map[key]int{}
	rows := make([]usage.Row, 0, len(written))
	item := usage.Item{AccountID: w.AccountID.String(), Route: "verify_list"}
	if w.KeyID != nil {
		item.KeyID = w.KeyID.String()
	}
	for _, a := range written {
		r := results[byIdx[a.Idx]]
		counts[key{string(r.Status), string(r.Reason)}]++
		item.Key = "list:" + id.String() + ":" + strconv.Itoa(a.Idx)
		row := usage.ResultRow(item, r, []byte{})
		row.Snapshot = nil // the results live with the list and go with it
		rows = append(rows, row)
	}
	var ss, rs []string
	var ns []int
	for k, n := range counts {
		ss, rs, ns = append(ss, k.status), append(rs, k.reason), append(ns, n)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO list_counts (list_id, status, reason, n)
		SELECT $1, * FROM unnest($2::text[], $3::text[], $4::int[])
		ON CONFLICT (list_id, status, reason) DO UPDATE SET n = list_counts.n + EXCLUDED.n`, id, ss, rs, ns); err != nil {
		return err
	}
	if w.Sandbox {
		return nil // never billed, and it holds nothing (docs/sandbox.md)
	}
	return usage.Bill(ctx, tx, id, rows, false)
}

// callback creates the list's completion callback, if it has a webhook: the list as GET shows it.
func (s *Store) callback(ctx context.Context, tx pgx.Tx, id uuid.UUID, event, publicURL string) (*uuid.UUID, error) {
	var (
		hook, secret *string
		account      uuid.UUID
	)
	if err := tx.QueryRow(ctx, `SELECT account_id, webhook_url, webhook_secret FROM lists WHERE id = $1`, id).Scan(&account, &hook, &secret); err != nil {
		return nil, err
	}
	if hook == nil {
		return nil, nil
	}
	l, err := scanList(tx.QueryRow(ctx, `SELECT `+listColumns+` FROM lists WHERE id = $1`, id))
	if err != nil {
		return nil, err
	}
	if l.Counts, err = counts(ctx, tx, id); err != nil {
		return nil, err
	}
	body, err := json.Marshal(Callback{Event: event, List: l.View(publicURL, time.Now())})
	if err != nil {
		return nil, err
	}
	sec := ""
	if secret != nil {
		sec = *secret
	}
	d, err := webhook.CreateListDelivery(ctx, tx, id, account, *hook, sec, body)
	if err != nil {
		return nil, err
	}
	// The delivery carries the sealed secret on; the list's copy is erased in the same
	// transaction (docs/reliability.md, "Webhook secrets at rest").
	if sec != "" {
		if _, err := tx.Exec(ctx, `UPDATE lists SET webhook_secret = NULL WHERE id = $1`, id); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

// Callback is the body of a list's completion callback.
type Callback struct {
	Event string `json:"event"` // list.completed or list.failed
	List  View   `json:"list"`
}

// Fail ends a running list that cannot go on (a chunk that can never be read or written), gives
// back what it did not verify, and creates its list.failed callback.
func (s *Store) Fail(ctx context.Context, id uuid.UUID, reason, publicURL string) (Written, error) {
	var out Written
	err := s.tx(ctx, func(tx pgx.Tx) error {
		st, err := lockList(ctx, tx, id, "")
		if err != nil || st.state.Finished() {
			return err
		}
		if err := finish(ctx, tx, st, Failed, reason, s.cfg); err != nil {
			return err
		}
		out.Finished = true
		if out.Delivery, err = s.callback(ctx, tx, id, "list.failed", publicURL); err != nil {
			return err
		}
		out.Next, err = s.startNext(ctx, tx, st.account)
		return err
	})
	return out, err
}

// Stalled returns, for running lists with no progress for longer than age, the chunks handed out
// but not written — their messages were lost (a NATS store lost, a publish that failed after the
// commit) — and for queued lists older than age, the chunks Start hands out now. Running lists
// whose last progress came before lostBefore are returned at once, whatever age: lostBefore is
// when the chunks' stream was created, so a chunk handed out before it was published to a stream
// that is gone (a server that lost its store). A round id keyed by the list's last update lets
// every sweep and every replica publish the same message ids, so JetStream drops the copies.
// Lists it returns are touched, so the next sweep waits age again.
func (s *Store) Stalled(ctx context.Context, age time.Duration, lostBefore time.Time, limit int) (chunks []Chunk, round map[uuid.UUID]string, err error) {
	round = map[uuid.UUID]string{}
	rows, err := s.db.Query(ctx, `SELECT id, account_id, state, updated_at FROM lists
		WHERE state IN ($1, $2) AND (updated_at < now() - $3 * interval '1 millisecond' OR (state = $2 AND updated_at < $5))
		ORDER BY updated_at LIMIT $4`,
		Queued, Running, age.Milliseconds(), limit, lostBefore)
	if err != nil {
		return nil, nil, err
	}
	type stale struct {
		id, account uuid.UUID
		state       State
		at          time.Time
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stale, error) {
		var x stale
		return x, r.Scan(&x.id, &x.account, &x.state, &x.at)
	})
	if err != nil {
		return nil, nil, err
	}
	for _, x := range found {
		if x.state == Queued {
			cs, err := s.Start(ctx, x.account)
			if err != nil {
				return nil, nil, err
			}
			chunks = append(chunks, cs...)
			if _, err := s.db.Exec(ctx, `UPDATE lists SET updated_at = now() WHERE id = $1 AND state = $2`, x.id, Queued); err != nil {
				return nil, nil, err
			}
			continue
		}
		cs, err := s.HandedOut(ctx, x.id)
		if err != nil {
			return nil, nil, err
		}
		chunks = append(chunks, cs...)
		round[x.id] = "sweep." + strconv.FormatInt(x.at.UnixMicro(), 10)
		if _, err := s.db.Exec(ctx, `UPDATE lists SET updated_at = now() WHERE id = $1 AND updated_at = $2`, x.id, x.at); err != nil {
			return nil, nil, err
		}
	}
	return chunks, round, nil
}

// HandedOut returns the chunks of list id that were handed out to the workers and are not written
// yet, if the list is running. Each of them has a message on its way, unless its publish was lost
// (a worker that died between the write that handed it out and the publish); publishing them
// again is harmless: the plain message ids are deduplicated within the stream's window, and a
// chunk verified twice is written once (only addresses without a result are written).
func (s *Store) HandedOut(ctx context.Context, id uuid.UUID) ([]Chunk, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT a.chunk FROM list_addresses a JOIN lists l ON l.id = a.list_id
		WHERE a.list_id = $1 AND l.state = $2 AND a.result IS NULL AND a.chunk < l.next_chunk ORDER BY 1`, id, Running)
	if err != nil {
		return nil, err
	}
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	chunks := make([]Chunk, 0, len(ns))
	for _, n := range ns {
		chunks = append(chunks, Chunk{ListID: id, Chunk: int(n)})
	}
	return chunks, nil
}

// HandedOutOfRunning returns the chunks handed out and not written of every running list, at most
// limit of them, the lists that went longest without progress first (HandedOut, for them all).
func (s *Store) HandedOutOfRunning(ctx context.Context, limit int) ([]Chunk, error) {
	rows, err := s.db.Query(ctx, `SELECT l.id, c.chunk FROM lists l
		CROSS JOIN LATERAL (SELECT DISTINCT a.chunk FROM list_addresses a
			WHERE a.list_id = l.id AND a.result IS NULL AND a.chunk < l.next_chunk) c
		WHERE l.state = $1 ORDER BY l.updated_at, l.id, c.chunk LIMIT $2`, Running, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Chunk, error) {
		var c Chunk
		var n int32
		err := r.Scan(&c.ListID, &n)
		c.Chunk = int(n)
		return c, err
	})
}

// counts reads a list's counts by status and reason.
func counts(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, id uuid.UUID) ([]Count, error) {
	rows, err := db.Query(ctx, `SELECT status, reason, n FROM list_counts WHERE list_id = $1 ORDER BY status, reason`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Count, error) {
		var c Count
		return c, r.Scan(&c.Status, &c.Reason, &c.N)
	})
}
