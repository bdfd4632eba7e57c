package webhook

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func TestListDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	other := b.account(t, "scale")
	b.create(t, other, "https://hooks.example.com/o", "", sampleBody, false)

	// 25 deliveries; five of them share one creation time, so the id breaks the tie.
	for i := range 25 {
		id := b.create(t, b.accountID, "https://hooks.example.com/cb", "", sampleBody, false)
		at := time.Now().Add(-time.Duration(100-i) * time.Minute)
		if i >= 10 && i < 15 {
			at = time.Now().Add(-50 * time.Minute)
		}
		state := StateDelivered
		if i%3 == 0 {
			state = StateFailed
		}
		pgtest.Exec(t, b.pool, `UPDATE deliveries SET created_at = $2, state = $3, attempts = 1, finished_at = now() WHERE id = $1`, id, at, state)
		pgtest.Exec(t, b.pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, http_status) VALUES ($1, 1, now(), 12, 500)`, id)
	}

	var all []Delivery
	cursor := ""
	for page := 0; ; page++ {
		p, err := ListDeliveries(ctx, b.pool, b.accountID, ListFilter{Limit: 10, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if page < 2 && (len(p.Deliveries) != 10 || p.NextCursor == "") || page == 2 && (len(p.Deliveries) != 5 || p.NextCursor != "") {
			t.Fatalf("page %d: %d deliveries, cursor %q", page, len(p.Deliveries), p.NextCursor)
		}
		all = append(all, p.Deliveries...)
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	seen := map[uuid.UUID]bool{}
	for i, d := range all {
		if seen[d.ID] {
			t.Fatalf("delivery %s listed twice", d.ID)
		}
		seen[d.ID] = true
		if i > 0 {
			prev := all[i-1]
			if d.CreatedAt.After(prev.CreatedAt) || d.CreatedAt.Equal(prev.CreatedAt) && bytes.Compare(d.ID[:], prev.ID[:]) > 0 {
				t.Fatalf("not newest first at %d", i)
			}
		}
		if len(d.Log) != 1 || d.Log[0].DurationMs != 12 || itoa(d.Log[0].HTTPStatus) != "500" {
			t.Fatalf("delivery %s has attempt log %+v", d.ID, d.Log)
		}
	}
	if len(seen) != 25 {
		t.Fatalf("listed %d deliveries, want 25 (and none of the other account)", len(seen))
	}

	failed, err := ListDeliveries(ctx, b.pool, b.accountID, ListFilter{Status: StateFailed, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed.Deliveries) != 9 {
		t.Errorf("failed filter: %d deliveries, want 9", len(failed.Deliveries))
	}
	for _, d := range failed.Deliveries {
		if d.State != StateFailed {
			t.Errorf("failed filter returned a %s delivery", d.State)
		}
	}

	for _, f := range []ListFilter{{Status: "bogus"}, {Limit: 101}, {Limit: -1}, {Cursor: "not-a-cursor"}, {Cursor: "AAAA"},
		{Cursor: strings.Repeat("A", 32)}} { // the right length, but from 1970: not issued here
		if _, err := ListDeliveries(ctx, b.pool, b.accountID, f); !errors.Is(err, ErrInvalidFilter) {
			t.Errorf("ListDeliveries(%+v) = %v, want ErrInvalidFilter", f, err)
		}
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := newReceiver(t, statuses(404, 200))
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	const secret = "whsec_12345678"
	orig := b.create(t, b.accountID, rc.url("/cb"), secret, sampleBody, true)
	if r := b.waitFinal(t, orig, 15*time.Second); r.state != StateFailed {
		t.Fatalf("original: %+v, want failed on the 404", r)
	}
	o := b.row(t, orig)

	// Two requests at once (a double click) get the same replay.
	var wg sync.WaitGroup
	got := make([]uuid.UUID, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, orig, replayEvent(b.accountID))
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0] != got[1] || got[0] == orig {
		t.Fatalf("double Replay = %v %v, %v %v; want one new id twice", got[0], errs[0], got[1], errs[1])
	}
	rep := got[0]
	r := b.waitFinal(t, rep, 15*time.Second)
	if r.state != StateDelivered || r.attempts != 1 || r.replayOf == nil || *r.replayOf != orig {
		t.Fatalf("replay %+v, want delivered once as a replay of %s", r, orig)
	}
	if !bytes.Equal(r.body, o.body) || r.signature == nil || *r.signature != *o.signature {
		t.Errorf("replay body/signature differ from the original's")
	}
	// A later request while the replay is delivered still does not deliver again.
	if again, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, orig, replayEvent(b.accountID)); err != nil || again != rep {
		t.Errorf("Replay after delivery = %v, %v; want the delivered replay %s", again, err, rep)
	}
	time.Sleep(300 * time.Millisecond)
	hits := rc.snapshot()
	if len(hits) != 2 {
		t.Fatalf("receiver got %d requests, want 2 (original, one replay)", len(hits))
	}
	if !bytes.Equal(hits[1].body, hits[0].body) || hits[1].header.Get(SignatureHeader) != hits[0].header.Get(SignatureHeader) {
		t.Errorf("the replay's bytes or signature differ from the original request's")
	}
	if err := Verify([]byte(secret), hits[1].body, hits[1].header.Get(SignatureHeader)); err != nil {
		t.Errorf("replay signature: %v", err)
	}

	// Errors for the API's table.
	if _, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, rep, replayEvent(b.accountID)); !errors.Is(err, ErrNotReplayable) {
		t.Errorf("Replay(delivered) = %v, want ErrNotReplayable", err)
	}
	other := b.account(t, "builder")
	if _, err := Replay(ctx, b.pool, b.js, queue.Layout{}, other, orig, replayEvent(other)); !errors.Is(err, ErrDeliveryNotFound) {
		t.Errorf("Replay(other account) = %v, want ErrDeliveryNotFound", err)
	}
	if _, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, uuid.New(), replayEvent(b.accountID)); !errors.Is(err, ErrDeliveryNotFound) {
		t.Errorf("Replay(unknown) = %v, want ErrDeliveryNotFound", err)
	}
	pending := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, false)
	if _, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, pending, replayEvent(b.accountID)); !errors.Is(err, ErrNotReplayable) {
		t.Errorf("Replay(pending) = %v, want ErrNotReplayable", err)
	}

	// Once every replay failed, a new request makes a new replay of the same original.
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'failed' WHERE id = $1`, rep)
	third, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, rep, replayEvent(b.accountID))
	if err != nil || third == rep || third == orig {
		t.Fatalf("Replay after the replay failed = %v, %v; want a new delivery", third, err)
	}
	if r := b.row(t, third); r.replayOf == nil || *r.replayOf != orig {
		t.Errorf("a replay of a replay must point at the original, got %v", r.replayOf)
	}

	// Each replay made is in the audit log, naming the delivery asked for and the receiver; the
	// requests that got a replay already made, and the refused ones, wrote nothing.
	rows, err := b.pool.Query(ctx, `SELECT detail FROM audit_events WHERE kind = 'delivery_replayed' AND account_id = $1 ORDER BY at, id`, b.accountID)
	if err != nil {
		t.Fatal(err)
	}
	details, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"delivery " + orig.String() + " replayed to " + rc.url(""), "delivery " + rep.String() + " replayed to " + rc.url("")}
	if !slices.Equal(details, want) {
		t.Errorf("delivery_replayed events %q, want %q", details, want)
	}
}

// replayEvent is the event of a replay asked for by an operator of accountID.
func replayEvent(accountID uuid.UUID) audit.Event {
	return audit.Event{AccountID: accountID.String(), ActorType: audit.ActorSystem, Actor: "test",
		Kind: audit.DeliveryReplayed, Outcome: audit.Success}
}

func TestPurgeExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	free, builder, scale := b.account(t, "free"), b.account(t, "builder"), b.account(t, "scale")
	type fixture struct {
		account  uuid.UUID
		state    string
		age      string // finished this long ago
		survives bool
	}
	fixtures := []fixture{
		{free, StateDelivered, "25 hours", false},
		{free, StateFailed, "25 hours", false},
		{free, StateFailed, "23 hours", true},
		{free, StateRetrying, "40 days", true}, // not finished: never removed
		{builder, StateDelivered, "25 hours", true},
		{builder, StateFailed, "29 days", true},
		{builder, StateFailed, "31 days", false},
		{scale, StateDelivered, "31 days", false},
		{scale, StateDelivered, "2 days", true},
	}
	ids := make([]uuid.UUID, len(fixtures))
	for i, f := range fixtures {
		ids[i] = b.create(t, f.account, "https://hooks.example.com/cb", "", sampleBody, false)
		pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = $2, finished_at = now() - $3::interval, attempts = 1 WHERE id = $1`, ids[i], f.state, f.age)
		pgtest.Exec(t, b.pool, `INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms) VALUES ($1, 1, now(), 1)`, ids[i])
	}
	// Batches of 2 exercise the loop: 4 rows expire.
	n, err := PurgeExpired(ctx, b.pool, 2, 10)
	if err != nil || n != 4 {
		t.Fatalf("PurgeExpired = %d, %v; want 4", n, err)
	}
	for i, f := range fixtures {
		var deliveries, attempts int
		if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries WHERE id = $1), (SELECT count(*) FROM delivery_attempts WHERE delivery_id = $1)`, ids[i]).Scan(&deliveries, &attempts); err != nil {
			t.Fatal(err)
		}
		if survived := deliveries == 1; survived != f.survives || attempts != deliveries {
			t.Errorf("fixture %d (%+v): delivery kept = %v with %d attempts", i, f, survived, attempts)
		}
	}
	if n, err := PurgeExpired(ctx, b.pool, 2, 10); err != nil || n != 0 {
		t.Errorf("second PurgeExpired = %d, %v; want 0", n, err)
	}
}

// A callback URL's user part, path and query can each carry the receiver's token (a Slack-style
// hooks.example/services/T/B/SECRET, ?token=…). The delivery log keeps the URL for its own
// retention (1 or 30 days); the audit log keeps its events for MAILVET_AUDIT_RETENTION (a year),
// so a replay's event names only where the replay goes: scheme, host and port
// (docs/personal-data.md, "Where it is stored").
func TestReplayEventNamesTheReceiverWithoutItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := "https://user:pw-secret@hooks.example.com:8443/services/T0/B0/path-secret?token=query-secret&x=1#frag-secret"
	orig := b.create(t, b.accountID, hook, "", sampleBody, false)
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET state = 'failed', finished_at = now() WHERE id = $1`, orig)
	if _, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, orig, replayEvent(b.accountID)); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	var detail string
	pgtest.Must(t, b.pool.QueryRow(ctx, `SELECT detail FROM audit_events WHERE kind = 'delivery_replayed' AND account_id = $1`,
		b.accountID).Scan(&detail), "audit event")
	if want := "delivery " + orig.String() + " replayed to https://hooks.example.com:8443"; detail != want {
		t.Errorf("delivery_replayed detail %q, want %q", detail, want)
	}
	for _, secret := range []string{"pw-secret", "path-secret", "query-secret", "frag-secret", "user"} {
		if strings.Contains(detail, secret) {
			t.Errorf("the audit event keeps %q of the callback URL: %q", secret, detail)
		}
	}
}
