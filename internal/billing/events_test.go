package billing

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func event(t *testing.T, id string, created time.Time, status string) stripe.Event {
	t.Helper()
	return subEvent(t, id, "customer.subscription.updated", "sub_9", created, status)
}

// subEvent is a subscription event of customer cus_9 on the price of the Scale tier.
func subEvent(t *testing.T, id, typ, sub string, created time.Time, status string) stripe.Event {
	t.Helper()
	raw := []byte(`{"id": "` + sub + `", "object": "subscription", "customer": "cus_9", "status": "` + status + `",
		"items": {"object": "list", "data": [{"id": "si_9", "price": {"id": "price_s"}}]}}`)
	var e stripe.Event
	body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "created": created.Unix(),
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

// A customer with two live subscriptions (a second checkout completed before the first one's
// webhook arrived) keeps the paid tier when either of them ends while the other pays; events are
// ordered per subscription, so one subscription's later event does not make another's stale; and
// a subscription's "created" event never undoes a later state that shares its second.
func TestSubscriptionEventsThatMustNotDropTheTier(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	// An upgrade from the dashboard has a Checkout session open (account.Store.Checkout).
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id, checkout_url, checkout_tier, checkout_expires_at)
		VALUES ('0b6f7d8e-3333-4c3e-9a55-000000000003', 'free', 'cus_9', 'https://checkout.stripe.test/c/pay/cs_1', 'scale', now() + interval '30 minutes')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	read := func() (tier, sub, status string) {
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT tier, stripe_subscription_id, subscription_status FROM accounts`).Scan(&tier, &sub, &status), "read")
		return
	}
	for _, s := range []struct {
		id, typ, sub string
		at           time.Time
		status       string
		outcome      Outcome
		tier, on     string
	}{
		// Same second: updated/active arrives before created/incomplete.
		{"evt_1", "customer.subscription.updated", "sub_A", t0, "active", Applied, "scale", "sub_A"},
		{"evt_2", "customer.subscription.created", "sub_A", t0, "incomplete", Stale, "scale", "sub_A"},
		// A second subscription, then the first one deleted: sub_B still pays.
		{"evt_3", "customer.subscription.created", "sub_B", t0.Add(time.Minute), "active", Applied, "scale", "sub_B"},
		{"evt_4", "customer.subscription.deleted", "sub_A", t0.Add(2 * time.Minute), "canceled", Applied, "scale", "sub_B"},
		// The last paying one ending does drop the tier.
		{"evt_5", "customer.subscription.deleted", "sub_B", t0.Add(3 * time.Minute), "canceled", Applied, "free", "sub_B"},
		// Two live subscriptions again; the one on record (the newer) is canceled: sub_C still pays.
		{"evt_6", "customer.subscription.created", "sub_C", t0.Add(4 * time.Minute), "active", Applied, "scale", "sub_C"},
		{"evt_7", "customer.subscription.created", "sub_D", t0.Add(5 * time.Minute), "active", Applied, "scale", "sub_D"},
		{"evt_8", "customer.subscription.deleted", "sub_D", t0.Add(6 * time.Minute), "canceled", Applied, "scale", "sub_C"},
		// sub_C goes unpaid (free); a new sub_E is taken and paid; sub_C's cancellation, stamped
		// later, arrives before sub_E's creation, which is still applied: ordered per subscription.
		{"evt_9", "customer.subscription.updated", "sub_C", t0.Add(7 * time.Minute), "unpaid", Applied, "free", "sub_C"},
		{"evt_11", "customer.subscription.deleted", "sub_C", t0.Add(9 * time.Minute), "canceled", Applied, "free", "sub_C"},
		{"evt_10", "customer.subscription.created", "sub_E", t0.Add(8 * time.Minute), "active", Applied, "scale", "sub_E"},
		// A late, older event of sub_E itself is still stale.
		{"evt_12", "customer.subscription.updated", "sub_E", t0.Add(7 * time.Minute), "incomplete", Stale, "scale", "sub_E"},
	} {
		out, err := ev.Apply(context.Background(), subEvent(t, s.id, s.typ, s.sub, s.at, s.status))
		if err != nil || out != s.outcome {
			t.Fatalf("%s: %v, %v; want %v", s.id, out, err, s.outcome)
		}
		if tier, sub, _ := read(); tier != s.tier || sub != s.on {
			t.Fatalf("after %s: tier %s on %s, want %s on %s", s.id, tier, sub, s.tier, s.on)
		}
		if s.id == "evt_1" {
			var open bool
			pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT checkout_url IS NOT NULL FROM accounts`).Scan(&open), "checkout")
			if open {
				t.Fatal("the paid Checkout session is still recorded as open")
			}
		}
	}
}

// A signed event with a value the account cannot hold is refused as a bad event (the webhook
// answers 400, so Stripe stops resending it) and leaves nothing behind: not even its id, so a
// corrected resend is applied.
func TestEventsWithValuesOutOfRangeAreRefused(t *testing.T) {
	pool := pgtest.New(t)
	ctx := context.Background()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-000000000009', 'free', 'cus_9')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	now := time.Now()
	cases := map[string]stripe.Event{
		"created after 9999":   event(t, "evt_far", time.Unix(maxUnix+1, 0), "active"),
		"created before 1970":  event(t, "evt_neg", time.Unix(-1, 0), "active"),
		"id of 300 bytes":      event(t, "evt_"+strings.Repeat("x", 296), now, "active"),
		"status of 300 bytes":  event(t, "evt_status", now, strings.Repeat("a", 300)),
		"period end past 9999": withRaw(t, event(t, "evt_period", now, "active"), "current_period_end", maxUnix+1),
	}
	for name, e := range cases {
		if _, err := ev.Apply(ctx, e); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: Apply = %v, want ErrBadEvent", name, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("stripe_events rows = %d (%v), want 0", n, err)
	}
	// The largest time that fits is applied.
	if out, err := ev.Apply(ctx, withRaw(t, event(t, "evt_edge", now, "active"), "current_period_end", maxUnix)); err != nil || out != Applied {
		t.Fatalf("edge event: %v %v", out, err)
	}
}

// withRaw sets one field of the event's data.object.
func withRaw(t *testing.T, e stripe.Event, field string, v any) stripe.Event {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(e.Data.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	obj[field] = v
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	e.Data.Raw = raw
	return e
}

// A subscription whose customer no account has yet (its events came before the Checkout that
// links the customer) is kept, and applied when the Checkout links it; a paying subscription of a
// price Mailvet does not sell leaves the tier alone and says so.
func TestSubscriptionBeforeItsCheckoutAndUnknownPrices(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	const acct = "0b6f7d8e-3333-4c3e-9a55-00000000000a"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ('`+acct+`', 'free')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	apply := func(e stripe.Event, want Outcome) {
		t.Helper()
		if out, err := ev.Apply(context.Background(), e); err != nil || out != want {
			t.Fatalf("%s: %v, %v; want %v", e.ID, out, err, want)
		}
	}
	tier := func() (tier string) {
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT tier FROM accounts WHERE id = $1`, acct).Scan(&tier), "tier")
		return tier
	}
	apply(subEvent(t, "evt_a", "customer.subscription.created", "sub_9", t0, "active"), UnknownCustomer)
	var checkout stripe.Event
	body, _ := json.Marshal(map[string]any{"id": "evt_b", "type": "checkout.session.completed", "created": t0.Unix(),
		"data": map[string]any{"object": map[string]any{"id": "cs_1", "object": "checkout.session",
			"client_reference_id": acct, "customer": "cus_9", "subscription": "sub_9"}}})
	pgtest.Must(t, json.Unmarshal(body, &checkout), "checkout event")
	apply(checkout, Applied)
	if got := tier(); got != "scale" {
		t.Fatalf("after the Checkout linked a customer whose subscription pays: tier %s, want scale", got)
	}

	// A price the deployment does not sell (say, a rotated MAILVET_STRIPE_PRICE_*), and that
	// subscription is the customer's only paying one: the tier stays, and the outcome tells.
	raw := []byte(`{"id": "sub_9", "object": "subscription", "customer": "cus_9", "status": "active",
		"items": {"object": "list", "data": [{"id": "si_9", "price": {"id": "price_old"}}]}}`)
	body, _ = json.Marshal(map[string]any{"id": "evt_c", "type": "customer.subscription.updated", "created": t0.Add(time.Minute).Unix(),
		"data": map[string]any{"object": json.RawMessage(raw)}})
	var unknown stripe.Event
	pgtest.Must(t, json.Unmarshal(body, &unknown), "event")
	apply(unknown, UnknownPrice)
	if got := tier(); got != "scale" {
		t.Fatalf("a paying subscription of an unknown price changed the tier to %s", got)
	}
}

// A Checkout linking a customer and that customer's first subscription event, handled at the same
// moment by two replicas, leave the account on the paid tier whichever commits first. Here the
// Checkout has linked the customer and found no subscription, but its commit is held (a deferred
// trigger waits for a lock the test holds); the subscription event arrives meanwhile. Before the
// two were ordered per customer, the event found no account (the link was not committed) and the
// Checkout no subscription (not yet written), so neither applied it and the paying customer stayed
// on free. The test releases the commit once the event has either finished or is seen waiting.
func TestCheckoutAndFirstSubscriptionEventAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const acct = "0b6f7d8e-3333-4c3e-9a55-0000000000ab"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ('`+acct+`', 'free')`)
	pgtest.Exec(t, pool, `CREATE FUNCTION held_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$`)
	pgtest.Exec(t, pool, `CREATE CONSTRAINT TRIGGER held_commit AFTER UPDATE ON accounts
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.stripe_customer_id = 'cus_9') EXECUTE FUNCTION held_commit()`)
	hold, err := pool.Acquire(ctx)
	pgtest.Must(t, err, "acquire")
	defer hold.Release()
	_, err = hold.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	pgtest.Must(t, err, "hold the commit")
	release := func() { _, _ = hold.Exec(context.Background(), `SELECT pg_advisory_unlock(4242)`) }
	waiters := func() (n int) {
		pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'advisory'`).Scan(&n), "activity")
		return n
	}
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	var checkout stripe.Event
	body, _ := json.Marshal(map[string]any{"id": "evt_cs", "type": "checkout.session.completed", "created": t0.Unix(),
		"data": map[string]any{"object": map[string]any{"id": "cs_1", "object": "checkout.session",
			"client_reference_id": acct, "customer": "cus_9", "subscription": "sub_9"}}})
	pgtest.Must(t, json.Unmarshal(body, &checkout), "checkout event")

	linked, subscribed := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := ev.Apply(ctx, checkout)
		linked <- err
	}()
	for i := 0; waiters() < 1; i++ {
		if i == 500 {
			release()
			t.Fatal("the Checkout never reached its commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	go func() {
		_, err := ev.Apply(ctx, subEvent(t, "evt_sub", "customer.subscription.created", "sub_9", t0, "active"))
		subscribed <- err
	}()
	var subErr error
	done := false
	for i := 0; !done && waiters() < 2; i++ { // finished beside the held Checkout, or waiting behind it
		select {
		case subErr = <-subscribed:
			done = true
		case <-time.After(10 * time.Millisecond):
		}
		if i == 500 {
			release()
			t.Fatal("the subscription event neither finished nor waited")
		}
	}
	release()
	if !done {
		subErr = <-subscribed
	}
	pgtest.Must(t, subErr, "subscription event")
	pgtest.Must(t, <-linked, "checkout")
	var tier string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT tier FROM accounts WHERE id = $1`, acct).Scan(&tier), "tier")
	if tier != "scale" {
		t.Fatalf("a customer whose subscription pays is on %s after its Checkout and first event met; want scale", tier)
	}
}

// The first two events of a new subscription, handled at the same moment (a card charged at once:
// created/incomplete and updated/active sent together), keep their order: the older one is stale
// whichever comes first, and the account ends on the newer state. Another transaction holds the
// account row while both are in flight, so that they interleave the same way every run: the
// newer one first, the older one waiting behind it.
func TestFirstEventsOfANewSubscriptionAtOnceKeepTheirOrder(t *testing.T) {
	pool := pgtest.New(t)
	ctx := context.Background()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-0000000000aa', 'free', 'cus_9')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	hold, err := pool.Begin(ctx)
	pgtest.Must(t, err, "begin")
	_, err = hold.Exec(ctx, `SELECT 1 FROM accounts WHERE stripe_customer_id = 'cus_9' FOR UPDATE`)
	pgtest.Must(t, err, "hold")
	waiting := func(n int) {
		t.Helper()
		for range 300 {
			var c int
			pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&c), "waiting")
			if c >= n {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("not %d transactions waiting", n)
	}
	type res struct {
		out Outcome
		err error
	}
	newer, older := make(chan res, 1), make(chan res, 1)
	go func() {
		out, err := ev.Apply(ctx, subEvent(t, "evt_active", "customer.subscription.updated", "sub_new", t0.Add(time.Second), "active"))
		newer <- res{out, err}
	}()
	waiting(1) // the newer one has written the subscription and waits for the account
	go func() {
		out, err := ev.Apply(ctx, subEvent(t, "evt_created", "customer.subscription.created", "sub_new", t0, "incomplete"))
		older <- res{out, err}
	}()
	waiting(2) // the older one waits for the newer one's per-customer lock
	pgtest.Must(t, hold.Rollback(ctx), "release")
	a, b := <-newer, <-older
	if a.err != nil || b.err != nil || a.out != Applied || b.out != Stale {
		t.Fatalf("newer: %v %v; older: %v %v; want applied and stale", a.out, a.err, b.out, b.err)
	}
	var tier, status string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT tier, subscription_status FROM accounts`).Scan(&tier, &status), "read")
	if tier != "scale" || status != "active" {
		t.Fatalf("the subscription's newest event says active, but the account is %s/%s", tier, status)
	}
}

// The account's tier is read from its best subscription's price by the deployment's price
// mapping of the moment, so that an operator's remapping (MAILVET_STRIPE_PRICE_*) applies at the
// customer's next event, whichever subscription it is about.
func TestTierFollowsTodaysPriceMapping(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-00000000000d', 'free', 'cus_9')`)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	if out, err := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale}).Apply(context.Background(),
		subEvent(t, "evt_1", "customer.subscription.created", "sub_A", t0, "active")); err != nil || out != Applied {
		t.Fatalf("%v %v", out, err)
	}
	remapped := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Builder})
	if out, err := remapped.Apply(context.Background(),
		subEvent(t, "evt_2", "customer.subscription.created", "sub_B", t0.Add(time.Minute), "incomplete")); err != nil || out != Applied {
		t.Fatalf("%v %v", out, err)
	}
	var tier string
	pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT tier FROM accounts`).Scan(&tier), "tier")
	if tier != "builder" {
		t.Fatalf("tier %s after the price was remapped to builder", tier)
	}
}

// A subscription that ended (deleted, or an incomplete one expired) is never brought back by an
// event of the same second that Stripe sent before the ending but delivered after it: Stripe
// sends nothing more for an ended subscription, so nothing would ever take the paid tier back.
func TestEndedSubscriptionIsNotRevivedBySameSecondEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, stripe_customer_id) VALUES ('0b6f7d8e-3333-4c3e-9a55-00000000000e', 'free', 'cus_9')`)
	ev := NewEvents(pool, map[string]plan.Tier{"price_s": plan.Scale})
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []struct {
		id, typ, sub string
		at           time.Time
		status       string
		outcome      Outcome
		tier, state  string
	}{
		{"evt_1", "customer.subscription.created", "sub_A", t0, "active", Applied, "scale", "active"},
		// Deleted and its last update share a second; the update arrives second.
		{"evt_3", "customer.subscription.deleted", "sub_A", t0.Add(time.Hour), "canceled", Applied, "free", "canceled"},
		{"evt_2", "customer.subscription.updated", "sub_A", t0.Add(time.Hour), "active", Stale, "free", "canceled"},
		// The same for an incomplete subscription that expired.
		{"evt_4", "customer.subscription.created", "sub_B", t0.Add(2 * time.Hour), "incomplete", Applied, "free", "incomplete"},
		{"evt_6", "customer.subscription.updated", "sub_B", t0.Add(3 * time.Hour), "incomplete_expired", Applied, "free", "incomplete_expired"},
		{"evt_5", "customer.subscription.updated", "sub_B", t0.Add(3 * time.Hour), "trialing", Stale, "free", "incomplete_expired"},
		// An ended subscription still takes a later ending of the same second (deleted after an
		// update to canceled).
		{"evt_7", "customer.subscription.deleted", "sub_B", t0.Add(3 * time.Hour), "canceled", Applied, "free", "canceled"},
	} {
		out, err := ev.Apply(context.Background(), subEvent(t, s.id, s.typ, s.sub, s.at, s.status))
		if err != nil || out != s.outcome {
			t.Fatalf("%s: %v, %v; want %v", s.id, out, err, s.outcome)
		}
		var tier, state string
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT tier, subscription_status FROM accounts`).Scan(&tier, &state), "read")
		if tier != s.tier || state != s.state {
			t.Fatalf("after %s: %s/%s, want %s/%s", s.id, tier, state, s.tier, s.state)
		}
	}
}
