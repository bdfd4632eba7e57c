package verification_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verification"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// service is a verification service over a fresh database and an embedded NATS server with no
// verifier worker, with the engine's real local layers, and a free account with a rate limit of
// 10 a minute.
func service(t *testing.T) (*verification.Service, *pgxpool.Pool, verification.Caller) {
	t.Helper()
	pool := pgtest.New(t)
	nc, js := natstest.Connect(t)
	if err := queue.EnsureStreams(context.Background(), js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	d := queue.NewDispatcher(nc, js, queue.Layout{})
	t.Cleanup(d.Close)
	// Only the local layers run here; the prober needs its names to be built at all.
	engine, err := verify.New(verify.Config{SMTP: smtp.Config{Helo: "verifier.example.com", MailFrom: "probe@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ledger := usage.NewLedger(pool, log)
	t.Cleanup(ledger.Close)
	svc := verification.New(verification.Config{Local: engine, Fleet: d, Ledger: ledger, Pool: pool, Log: log})
	account := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'free')`, account)
	who := verification.Caller{Account: account, Tier: plan.Free,
		Limits: plan.Limits{MonthlyCalls: 100, RateLimitPerMin: 10}}
	return svc, pool, who
}

// One admits, verifies and returns an answer that is billed only when the caller says it was
// delivered; an answer closed undelivered gives its unit back and logs nothing.
func TestOneBillsWhatWasDelivered(t *testing.T) {
	t.Parallel()
	svc, pool, who := service(t)
	ctx := context.Background()

	// "not-an-address" fails the syntax layer, so the local layers decide it: no worker needed.
	ans, w, err := svc.One(ctx, verification.Request{Caller: who, Key: "k1"}, "not-an-address")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Known || w.Limit != 10 || !w.RemainingKnown || w.Remaining != 9 {
		t.Fatalf("window %+v, want limit 10 and 9 remaining", w)
	}
	if len(ans.Results) != 1 || ans.Results[0].Status != verdict.StatusInvalid {
		t.Fatalf("results %+v, want one invalid", ans.Results)
	}
	ans.Close() // not delivered: nothing owed
	usagetest.Settle(t, pool)
	if c := usagetest.Of(t, pool, who.Account); c != (usagetest.Counts{}) {
		t.Fatalf("an undelivered answer left %+v, want nothing", c)
	}

	ans, _, err = svc.One(ctx, verification.Request{Caller: who, Key: "k2"}, "not-an-address")
	if err != nil {
		t.Fatal(err)
	}
	ans.Deliver()
	ans.Close()
	usagetest.Settle(t, pool)
	if c := usagetest.Of(t, pool, who.Account); c.Quota != 1 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("a delivered answer left %+v, want one quota unit and nothing held", c)
	}
	rows := usagetest.Rows(t, pool, who.Account)
	if len(rows) != 1 || rows[0].ItemKey != "k2:0" || rows[0].Route != "verify" {
		t.Fatalf("usage rows %+v, want the one row k2:0 of route verify", rows)
	}
}

// Requests the service cannot serve end in typed errors that name why, and hold nothing.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	svc, pool, who := service(t)
	ctx := context.Background()
	req := verification.Request{Caller: who, Key: "k"}

	var inv *verification.InvalidError
	if _, _, err := svc.One(ctx, req, "  "); !errors.As(err, &inv) || !strings.Contains(inv.Message, "email") {
		t.Fatalf("a blank address: %v, want an InvalidError naming the field", err)
	}
	if _, _, err := svc.Batch(ctx, req, make([]string, verification.MaxBatch+1)); !errors.As(err, &inv) {
		t.Fatalf("a batch too large: %v, want an InvalidError", err)
	}
	secret := "short"
	if _, _, err := svc.Async(ctx, req, "a@example.com", verification.Callback{URL: "https://example.com/hook", Secret: &secret}); !errors.As(err, &inv) || !strings.Contains(inv.Message, "webhook_secret") {
		t.Fatalf("a short secret: %v, want an InvalidError naming webhook_secret", err)
	}

	// An address the local layers cannot decide needs a worker, and none is running: the batch
	// is refused after admission, and its hold goes back at once.
	_, w, err := svc.Batch(ctx, req, []string{"not-an-address", "someone@example.com"})
	var un *verification.UnavailableError
	if !errors.As(err, &un) || !errors.Is(err, queue.ErrNoWorkers) {
		t.Fatalf("a batch without workers: %v, want an UnavailableError of queue.ErrNoWorkers", err)
	}
	if !w.Known || w.Remaining != 8 {
		t.Fatalf("window %+v: admission ran, and its two rate units are spent", w)
	}
	usagetest.Settle(t, pool)
	if c := usagetest.Of(t, pool, who.Account); c != (usagetest.Counts{}) {
		t.Fatalf("a refused batch left %+v, want nothing", c)
	}

	// Past the rate limit, admission's own refusal comes back as it is.
	_, _, err = svc.Batch(ctx, req, make11("not-an-address"))
	var rl *usage.RateLimited
	if !errors.As(err, &rl) || rl.Limit != 10 {
		t.Fatalf("a batch over the rate limit: %v, want usage.RateLimited", err)
	}
}

func make11(e string) []string {
	out := make([]string, 11)
	for i := range out {
		out[i] = e
	}
	return out
}
