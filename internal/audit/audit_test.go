package audit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/testclock"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

func event(account string, kind audit.Kind, at time.Time) audit.Event {
	return audit.Event{AccountID: account, At: at, ActorType: audit.ActorUser, Actor: "ann@example.com",
		Client: netip.MustParseAddr("203.0.113.7"), Kind: kind, Outcome: audit.Success, Detail: "a detail"}
}

// Events are listed newest first, a page at a time, with every field as written; only the asked
// account's events are ever listed, whatever the cursor.
func TestRecordAndListPagesNewestFirstPerAccount(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	a, b := uuid.NewString(), uuid.NewString()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		if err := audit.Record(ctx, pool, event(a, audit.KeyCreated, start.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	// b's events are newer than all of a's, so a leak would show at the head of a's first page.
	if err := audit.Record(ctx, pool, event(b, audit.SignIn, start.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	var got []audit.Event
	cur := ""
	for pages := 0; ; pages++ {
		p, err := audit.List(ctx, pool, a, audit.Filter{Limit: 2, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Events...)
		if p.NextCursor == "" {
			if pages != 2 {
				t.Errorf("%d pages of 2 for 5 events, want 3", pages+1)
			}
			break
		}
		cur = p.NextCursor
	}
	if len(got) != 5 {
		t.Fatalf("listed %d events of a, want 5: %+v", len(got), got)
	}
	for i, e := range got {
		want := start.Add(time.Duration(4-i) * time.Minute)
		if !e.At.Equal(want) || e.AccountID != a || e.Kind != audit.KeyCreated || e.Outcome != audit.Success ||
			e.ActorType != audit.ActorUser || e.Actor != "ann@example.com" || e.Client.String() != "203.0.113.7" || e.Detail != "a detail" {
			t.Errorf("event %d: %+v, want at %s", i, e, want)
		}
	}
	pb, err := audit.List(ctx, pool, b, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pb.Events) != 1 || pb.Events[0].Kind != audit.SignIn {
		t.Errorf("b's events: %+v", pb.Events)
	}
	// a's cursor used for b positions within b's events only.
	p, err := audit.List(ctx, pool, b, audit.Filter{Cursor: cur})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Events {
		if e.AccountID != b {
			t.Errorf("b's list with a's cursor shows %+v", e)
		}
	}
}

// Bad filters are ErrInvalidFilter; bad events ErrInvalidEvent, and nothing is written.
func TestListAndRecordRefuseWhatTheyCannotHold(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	acct := uuid.NewString()
	for _, f := range []audit.Filter{{Limit: -1}, {Limit: audit.MaxPageSize + 1}, {Cursor: "x"}, {Cursor: strings.Repeat("A", 32)}} {
		if _, err := audit.List(ctx, pool, acct, f); !errors.Is(err, audit.ErrInvalidFilter) {
			t.Errorf("List(%+v): %v, want ErrInvalidFilter", f, err)
		}
	}
	if _, err := audit.List(ctx, pool, "not-a-uuid", audit.Filter{}); !errors.Is(err, audit.ErrInvalidFilter) {
		t.Errorf("List of a bad account id: %v", err)
	}
	for _, e := range []audit.Event{
		{AccountID: acct, ActorType: audit.ActorUser, Outcome: audit.Success},
		{AccountID: acct, ActorType: audit.ActorUser, Kind: audit.SignIn, Outcome: "maybe"},
		{AccountID: acct, ActorType: "robot", Kind: audit.SignIn, Outcome: audit.Success},
		{AccountID: "1", ActorType: audit.ActorUser, Kind: audit.SignIn, Outcome: audit.Success},
	} {
		if err := audit.Record(ctx, pool, e); !errors.Is(err, audit.ErrInvalidEvent) {
			t.Errorf("Record(%+v): %v, want ErrInvalidEvent", e, err)
		}
	}
	var n int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&n), "count")
	if n != 0 {
		t.Errorf("%d invalid events were written", n)
	}
}

// Text is bounded and cleaned rather than refused: an event is never lost to its detail's length
// or a control character in it; an event without an account (an unknown email's failed sign-in)
// is kept for operators.
func TestRecordBoundsTheText(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	acct := uuid.NewString()
	e := event(acct, audit.KeyCreated, time.Time{})
	e.Detail = "label \x1b[31mred\u202e " + strings.Repeat("é", 500)
	e.Actor = strings.Repeat("a", 400)
	if err := audit.Record(ctx, pool, e); err != nil {
		t.Fatal(err)
	}
	p, err := audit.List(ctx, pool, acct, audit.Filter{})
	if err != nil || len(p.Events) != 1 {
		t.Fatalf("%v %+v", err, p)
	}
	got := p.Events[0]
	if n := len([]rune(got.Detail)); n != audit.MaxDetailLen || strings.ContainsAny(got.Detail, "\x1b\u202e") {
		t.Errorf("detail of %d characters: %q", n, got.Detail)
	}
	if n := len([]rune(got.Actor)); n != audit.MaxActorLen {
		t.Errorf("actor of %d characters", n)
	}
	if time.Since(got.At) > time.Minute || time.Since(got.At) < -time.Minute {
		t.Errorf("an event without At got %s, want the database's now", got.At)
	}
	orphan := event("", audit.SignIn, time.Time{})
	orphan.Outcome, orphan.Client = audit.Failure, netip.Addr{}
	if err := audit.Record(ctx, pool, orphan); err != nil {
		t.Fatal(err)
	}
	var n int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE account_id IS NULL AND client_addr IS NULL`).Scan(&n), "count")
	if n != 1 {
		t.Errorf("%d events without an account, want 1", n)
	}
}

// Record writes with the change's transaction: the event commits with it or not at all.
func TestRecordIsPartOfTheTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	acct := uuid.NewString()
	boom := errors.New("the change failed")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := audit.Record(ctx, tx, event(acct, audit.AccountDeleted, time.Time{})); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	p, err := audit.List(ctx, pool, acct, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 0 {
		t.Errorf("a rolled-back change left its event: %+v", p.Events)
	}
}

// A write RecordOrLog cannot make is logged at ERROR with the event and counted, never dropped
// silently, and the caller goes on.
func TestRecordOrLogLogsAFailedWrite(t *testing.T) {
	pool := pgtest.New(t)
	ctx := context.Background()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	before := audit.WriteFailures()
	pgtest.Exec(t, pool, `ALTER TABLE audit_events RENAME TO audit_events_away`)
	audit.RecordOrLog(ctx, pool, log, event(uuid.NewString(), audit.SignOut, time.Time{}))
	if audit.WriteFailures() != before+1 {
		t.Errorf("write failures %d, want %d", audit.WriteFailures(), before+1)
	}
	out := buf.String()
	for _, want := range []string{`"level":"ERROR"`, `"msg":"audit event not written"`, `"kind":"signout"`, `"actor":"ann@example.com"`, `"client":"203.0.113.7"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
}

// Purge deletes what is older than the retention at the (moved) clock and nothing newer; several
// replicas purging at once share the rows and together delete each once.
func TestPurgeDeletesEventsPastTheRetention(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	acct := uuid.NewString()
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for i := range 250 {
		pgtest.Must(t, audit.Record(ctx, pool, event(acct, audit.SignIn, clock.Now().Add(time.Duration(i)*time.Second))), "record")
	}
	pgtest.Must(t, audit.Record(ctx, pool, event(acct, audit.SignOut, clock.Now().Add(48*time.Hour))), "record")
	retention := 30 * 24 * time.Hour
	n, err := audit.Purge(ctx, pool, clock.Now(), retention, 10, 100)
	if err != nil || n != 0 {
		t.Fatalf("purge before any event is old: %d, %v", n, err)
	}
	clock.Add(retention + 24*time.Hour) // every sign-in is past the retention, the sign-out not yet
	var wg sync.WaitGroup
	counts := make([]int64, 3)
	for r := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := audit.Purge(ctx, pool, clock.Now(), retention, 10, 100)
			if err != nil {
				t.Error(err)
			}
			counts[r] = n
		}()
	}
	wg.Wait()
	if total := counts[0] + counts[1] + counts[2]; total != 250 {
		t.Errorf("replicas purged %v, %d in all, want 250", counts, total)
	}
	p, err := audit.List(ctx, pool, acct, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 1 || p.Events[0].Kind != audit.SignOut {
		t.Errorf("left after the purge: %+v", p.Events)
	}
}

// RunRetention is the loop every API replica runs: once the clock has moved past the retention,
// its next run purges the old events.
func TestRunRetentionPurgesOnceTheClockMoves(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acct := uuid.NewString()
	clock := testclock.New(time.Now())
	pgtest.Must(t, audit.Record(ctx, pool, event(acct, audit.KeyRevoked, clock.Now())), "record")
	done := make(chan error, 1)
	go func() {
		done <- audit.RunRetention(ctx, pool, audit.Retention{Keep: audit.DefaultRetention, Every: 10 * time.Millisecond, Now: clock.Now})
	}()
	count := func() int {
		var n int
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&n), "count")
		return n
	}
	time.Sleep(100 * time.Millisecond) // several runs: the event is younger than a year
	if n := count(); n != 1 {
		t.Fatalf("%d events after runs within the retention, want 1", n)
	}
	clock.Add(audit.DefaultRetention + time.Minute)
	wait.For(t, 10*time.Second, "the retention loop to purge the year-old event", func() bool { return count() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunRetention returned %v on a clean stop", err)
	}
}
