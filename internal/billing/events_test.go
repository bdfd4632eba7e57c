package billing

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func event(t *testing.T, id string, created time.Time, status string) stripe.Event {
	t.Helper()
	raw := []byte(`{"id": "sub_9", "object": "subscription", "customer": "cus_9", "status": "` + status + `",
		"items": {"object": "list", "data": [{"id": "si_9", "price": {"id": "price_s"}}]}}`)
	var e stripe.Event
	body, _ := json.Marshal(map[string]any{"id": id, "type": "customer.subscription.updated", "created": created.Unix(),
		"data": map[string]any{"object": json.RawMessage(raw)}})
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// Two API replicas receiving the same event at once apply it exactly once.
func TestConcurrentRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-000000000001', 'free', 'cus_9')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	e := event(t, "evt_same", time.Now(), "active")
	var mu sync.Mutex
	outcomes := map[Outcome]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			out, err := ev.Apply(context.Background(), e)
			if err != nil {
				// The losers wait on the winner's row in stripe_events and then see a duplicate; none
				// may fail.
				t.Errorf("Apply: %v", err)
			}
			mu.Lock()
			outcomes[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if outcomes[Applied] != 1 || outcomes[Duplicate] != 3 {
		t.Fatalf("outcomes %v, want one applied and three duplicates", outcomes)
	}
	var tier string
	pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT tier FROM accounts WHERE stripe_customer_id = 'cus_9'`).Scan(&tier), "tier")
	if tier != "scale" {
		t.Fatalf("tier %s", tier)
	}
}

func TestOutOfOrderEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-000000000002', 'free', 'cus_9')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		id      string
		at      time.Time
		status  string
		outcome Outcome
		want    string // subscription_status after the step
	}{
		{"evt_b", t0.Add(2 * time.Minute), "past_due", Applied, "past_due"},
		{"evt_a", t0.Add(time.Minute), "active", Stale, "past_due"},
		{"evt_c", t0.Add(2 * time.Minute), "active", Applied, "active"}, // same second: arrival order wins
		{"evt_d", t0.Add(3 * time.Minute), "canceled", Applied, "canceled"},
	}
	for _, s := range steps {
		out, err := ev.Apply(context.Background(), event(t, s.id, s.at, s.status))
		if err != nil || out != s.outcome {
			t.Fatalf("%s: %v, %v; want %v", s.id, out, err, s.outcome)
		}
		var status, tier string
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT subscription_status, tier FROM accounts`).Scan(&status, &tier), "read")
		if status != s.want {
			t.Fatalf("after %s: status %s, want %s", s.id, status, s.want)
		}
		if s.id == "evt_d" && tier != "free" {
			t.Fatalf("a canceled subscription keeps tier %s", tier)
		}
	}
}
