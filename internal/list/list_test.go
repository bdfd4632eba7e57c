package list_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/verdict"
)

var limits = list.Limits{MaxRows: 100, MaxLineBytes: 200}

func readAll(t *testing.T, f list.Format, column, file string) (*list.Reader, []list.Row, error) {
	t.Helper()
	rd, err := list.NewReader(strings.NewReader(file), f, column, limits)
	if err != nil {
		return nil, nil, err
	}
	var rows []list.Row
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd, rows, nil
		}
		if err != nil {
			return rd, rows, err
		}
		rows = append(rows, r)
	}
}

func TestEmailColumnDetection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		header, column, want string
	}{
		{"id,E-mail,name", "", "E-mail"},
		{"id,Email Address,name", "", "Email Address"},
		{"id,contact_email", "", "contact_email"},
		{"addr,name", "", "addr"}, // nothing looks like email: the first column
		// A CRM export's postal Address before its Email: the name that says email wins, then
		// mail, then address.
		{"Name,Address,City,Email", "", "Email"},
		{"Name,Address,Mail", "", "Mail"},
		{"Name,Mail,Work E-mail", "", "Work E-mail"},
		{"Name,Address,City", "", "Address"},
		{"Email Opt Out,Name,E-Mail Address,Email", "", "E-Mail Address"},
		{"Email Opt Out,Name,Work email", "", "Email Opt Out"},
		{"id,Primary,Secondary", "secondary", "Secondary"},
	} {
		cells := strings.Split(c.header, ",")
		for i := range cells {
			if cells[i] == c.want {
				cells[i] = "ann@example.com"
			} else {
				cells[i] = "x"
			}
		}
		file := c.header + "\n" + strings.Join(cells, ",") + "\n"
		rd, rows, err := readAll(t, list.CSV, c.column, file)
		if err != nil {
			t.Errorf("%s: %v", c.header, err)
			continue
		}
		if got := rd.Columns()[rd.EmailColumn()]; got != c.want {
			t.Errorf("%s column=%q: picked %q, want %q", c.header, c.column, got, c.want)
		}
		if len(rows) != 1 {
			t.Errorf("%s: %d rows", c.header, len(rows))
		}
	}
}

func TestReaderKeepsColumnsAndNormalises(t *testing.T) {
	t.Parallel()
	_, rows, err := readAll(t, list.CSV, "", "\ufeffname,email\r\n\"Doe, Ann\", Ann@Example.COM \r\nBob,\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Email != "ann@example.com" || rows[0].Cols[0] != "Doe, Ann" || rows[0].Cols[1] != " Ann@Example.COM " || rows[0].No != 1 {
		t.Fatalf("rows %+v", rows)
	}
	if rows[1].Email != "" || rows[1].No != 2 {
		t.Errorf("an empty cell is a row with an empty address: %+v", rows[1])
	}
}

func TestReaderRefusesWithTheLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		format list.Format
		file   string
		line   int
	}{
		{"ragged", list.CSV, "email,name\na@x.test,A\nb@x.test\n", 3},
		{"quote", list.CSV, "email\n\"a@x.test\n", 2},
		{"bad UTF-8 in CSV", list.CSV, "email\na@x.test\n\xc3\x28@x.test\n", 3},
		{"long line", list.Text, "a@x.test\n" + strings.Repeat("b", 300) + "@x.test\n", 2},
		{"long CSV line", list.CSV, "email\n" + strings.Repeat("b", 300) + "@x.test\n", 2},
		{"NDJSON array", list.NDJSON, "{\"email\":\"a@x.test\"}\n\n[1]\n", 3},
		{"NDJSON number", list.NDJSON, "{\"email\":7}\n", 1},
	} {
		_, _, err := readAll(t, c.format, "", c.file)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != c.line {
			t.Errorf("%s: %v, want an InputError on line %d", c.name, err, c.line)
		}
	}
	_, _, err := readAll(t, list.Text, "", strings.Repeat("a@x.test\n", 101))
	var many *list.TooManyRowsError
	if !errors.As(err, &many) || many.Limit != 100 {
		t.Errorf("101 rows: %v", err)
	}
}

// fixture is a store on a fresh database with one account.
func fixture(t *testing.T, cfg list.Config) (*list.Store, account.Account) {
	t.Helper()
	pool := pgtest.New(t)
	a, err := account.NewStore(pool).Create(context.Background(), account.NewAccount{Tier: plan.Builder})
	pgtest.Must(t, err, "account")
	return list.NewStore(pool, cfg), a
}

func importText(t *testing.T, s *list.Store, a account.Account, n int) list.List {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "u%d@d%d.test\n", i, i%7)
	}
	rd, err := list.NewReader(strings.NewReader(b.String()), list.Text, "", list.Limits{MaxRows: 10_000, MaxLineBytes: 100})
	pgtest.Must(t, err, "reader")
	l, err := s.Import(context.Background(), list.Upload{AccountID: a.ID, Tier: plan.Builder, Plan: plan.Defaults()[plan.Builder], Now: time.Now()}, rd)
	pgtest.Must(t, err, "import")
	return l
}

// deliver works chunk c as a verifier worker would, every address deliverable, and writes it.
func deliver(t *testing.T, s *list.Store, c list.Chunk) list.Written {
	t.Helper()
	w, err := s.Work(context.Background(), c)
	pgtest.Must(t, err, "work")
	res := make([]verdict.Result, len(w.Addresses))
	for i, addr := range w.Addresses {
		res[i] = verdict.Result{Email: addr.Email}
		res[i].Apply(verdict.OutcomeDeliverable)
	}
	out, err := s.Write(context.Background(), c, w, res, "https://api.test")
	pgtest.Must(t, err, "write")
	return out
}

// Fair share: a running list has at most Window chunks handed out, the next comes as one is
// written; an account runs at most MaxRunning lists, and the next queued one starts when one
// finishes.
func TestWindowAndRunningSlots(t *testing.T) {
	t.Parallel()
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window, cfg.MaxRunning = 10, 3, 2
	s, a := fixture(t, cfg)
	ctx := context.Background()
	first, second, third := importText(t, s, a, 95), importText(t, s, a, 5), importText(t, s, a, 5)
	if first.Chunks != 10 || first.State != list.Queued {
		t.Fatalf("first list %+v", first)
	}
	started, err := s.Start(ctx, first.AccountID)
	pgtest.Must(t, err, "start")
	if len(started) != 3+1 { // first's window, and second's only chunk; third waits
		t.Fatalf("started %v", started)
	}
	if l, _ := s.Get(ctx, a.ID, third.ID); l.State != list.Queued {
		t.Fatalf("third list %s, want queued behind two running", l.State)
	}

	var firstChunk, secondChunk list.Chunk
	for _, c := range started {
		switch {
		case c.ListID == first.ID && c.Chunk == 0:
			firstChunk = c
		case c.ListID == second.ID:
			secondChunk = c
		}
	}
	if firstChunk.ListID != first.ID || secondChunk.ListID != second.ID {
		t.Fatalf("started %v: want the first list's chunk 0 and the second list's", started)
	}
	out := deliver(t, s, firstChunk)
	if out.Wrote != 10 || len(out.Next) != 1 || out.Next[0].Chunk != 3 {
		t.Fatalf("after one chunk of the first list: %+v", out)
	}
	if again := deliver(t, s, firstChunk); again.Wrote != 0 || len(again.Next) != 0 {
		t.Fatalf("a chunk written twice: %+v", again)
	}
	// The second list completes and lets the third start.
	out = deliver(t, s, secondChunk)
	if !out.Finished || len(out.Next) != 1 || out.Next[0].ListID != third.ID {
		t.Fatalf("second list's last chunk: %+v", out)
	}
	if l, _ := s.Get(ctx, a.ID, second.ID); l.State != list.Completed || l.Verified != 5 || l.ExpiresAt == nil {
		t.Fatalf("second list %+v", l)
	}
}
