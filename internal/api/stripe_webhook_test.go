package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/mailvet/mailvet/internal/plan"
)

const (
	whsec        = "whsec_test_mailvet"
	priceBuilder = "price_builder_monthly"
	priceScale   = "price_scale_monthly"
)

var stripeEnv = map[string]string{
	"STRIPE_WEBHOOK_SECRET":        whsec,
	"MAILVET_STRIPE_PRICE_BUILDER": priceBuilder,
	"MAILVET_STRIPE_PRICE_SCALE":   priceScale,
}

// subEvent builds a customer.subscription.* event as Stripe sends it.
func subEvent(id, typ string, created time.Time, sub map[string]any) []byte {
	obj := map[string]any{
		"id": "sub_1", "object": "subscription", "status": "active",
		"current_period_start": 1793491200, "current_period_end": 1796083200, "billing_cycle_anchor": 1793491200,
		"cancel_at_period_end": false, "canceled_at": nil, "cancel_at": nil, "trial_start": nil, "trial_end": nil,
		"items": map[string]any{"object": "list", "data": []any{
			map[string]any{"id": "si_1", "object": "subscription_item", "price": map[string]any{"id": priceBuilder, "object": "price"}},
		}},
	}
	for k, v := range sub {
		obj[k] = v
	}
	ev := map[string]any{"id": id, "object": "event", "type": typ, "created": created.Unix(),
		"api_version": "2020-08-27", "data": map[string]any{"object": obj}}
	raw, _ := json.Marshal(ev)
	return raw
}

func (b *testBundle) deliver(payload []byte) reply {
	b.t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: whsec})
	return b.call(http.MethodPost, "/v1/stripe/webhook", "", payload, "Stripe-Signature", signed.Header)
}

func (b *testBundle) accountJSON(key string) map[string]any {
	b.t.Helper()
	return b.call(http.MethodGet, "/v1/management/account", key, nil).want(b.t, 200, "").body
}

func TestStripeSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, stripeEnv)
	_, key := b.account(plan.Free, "cus_life")
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

	r := b.deliver(subEvent("evt_1", "customer.subscription.created", t0, map[string]any{
		"customer": "cus_life", "status": "trialing", "trial_start": 1793491200, "trial_end": 1794700800,
	})).want(t, 200, "")
	if r.body["outcome"] != "applied" {
		t.Fatalf("outcome %v", r.body["outcome"])
	}
	a := b.accountJSON(key)
	want := map[string]any{"tier": "builder", "subscription_status": "trialing", "cancel_at_period_end": false,
		"trial_start": "2026-11-01T00:00:00Z", "trial_end": "2026-11-15T00:00:00Z",
		"current_period_end": "2026-12-01T00:00:00Z", "billing_cycle_anchor": "2026-11-01T00:00:00Z", "canceled_at": nil}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("after created: %s = %v, want %v", k, a[k], v)
		}
	}
	if a["limits"].(map[string]any)["max_keys"] != float64(5) {
		t.Errorf("limits must follow the new tier: %v", a["limits"])
	}

	// Upgrade to scale with a scheduled cancellation.
	b.deliver(subEvent("evt_2", "customer.subscription.updated", t0.Add(time.Hour), map[string]any{
		"customer": "cus_life", "cancel_at_period_end": true, "canceled_at": 1793494800, "cancel_at": 1796083200,
		"items": map[string]any{"object": "list", "data": []any{
			map[string]any{"id": "si_1", "object": "subscription_item", "price": map[string]any{"id": priceScale, "object": "price"}}}},
	})).want(t, 200, "")
	a = b.accountJSON(key)
	if a["tier"] != "scale" || a["subscription_status"] != "active" || a["cancel_at_period_end"] != true ||
		a["canceled_at"] != "2026-11-01T01:00:00Z" || a["cancel_at"] != "2026-12-01T00:00:00Z" {
		t.Errorf("after updated: %v", a)
	}

	// An older event that arrives late changes nothing.
	r = b.deliver(subEvent("evt_0", "customer.subscription.updated", t0.Add(-time.Hour), map[string]any{
		"customer": "cus_life", "status": "past_due"}))
	if r.want(t, 200, "").body["outcome"] != "stale" {
		t.Errorf("late event outcome %v", r.body["outcome"])
	}
	if a = b.accountJSON(key); a["tier"] != "scale" || a["subscription_status"] != "active" {
		t.Errorf("a stale event changed the account: %v", a)
	}

	// A redelivered event id is applied once: change the row by hand, redeliver, nothing moves.
	_, err := b.pool.Exec(context.Background(), `UPDATE accounts SET subscription_status = 'manual' WHERE stripe_customer_id = 'cus_life'`)
	mustOK(t, err)
	r = b.deliver(subEvent("evt_2", "customer.subscription.updated", t0.Add(time.Hour), map[string]any{"customer": "cus_life"}))
	if r.want(t, 200, "").body["outcome"] != "duplicate" {
		t.Errorf("redelivery outcome %v", r.body["outcome"])
	}
	if a = b.accountJSON(key); a["subscription_status"] != "manual" {
		t.Errorf("a redelivered event was applied again: %v", a)
	}

	// Deletion drops the account to free.
	b.deliver(subEvent("evt_3", "customer.subscription.deleted", t0.Add(2*time.Hour), map[string]any{
		"customer": "cus_life", "status": "canceled", "canceled_at": 1793498400})).want(t, 200, "")
	a = b.accountJSON(key)
	if a["tier"] != "free" || a["subscription_status"] != "canceled" || a["canceled_at"] != "2026-11-01T02:00:00Z" {
		t.Errorf("after deleted: %v", a)
	}
	if a["limits"].(map[string]any)["max_keys"] != float64(2) {
		t.Errorf("limits after deletion: %v", a["limits"])
	}

	// Text that is not UTF-8 is refused like anywhere else in the API, not stored as U+FFFD.
	notUTF8 := bytes.Replace(subEvent("evt_UTF8", "customer.subscription.updated", time.Now(), map[string]any{"customer": "cus_rej"}),
		[]byte("UTF8"), []byte("\xff\xfe"), 1)
	if r := b.deliver(notUTF8).want(t, 400, CodeInvalidRequest); !strings.Contains(fmt.Sprint(r.body["message"]), "UTF-8") {
		t.Errorf("an event with bytes that are not UTF-8: %v", r.body["message"])
	}
	var n int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events`).Scan(&n))
	if n != 4 {
		t.Errorf("%d events recorded, want 4", n)
	}
}

func TestStripeWebhookOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, stripeEnv)
	_, key := b.account(plan.Builder, "cus_out")
	now := time.Now()
	tests := []struct {
		name    string
		payload []byte
		outcome string
	}{
		{"unknown customer", subEvent("evt_u", "customer.subscription.updated", now, map[string]any{"customer": "cus_stranger"}), "unknown_customer"},
		{"event type not acted on", []byte(`{"id": "evt_i", "object": "event", "type": "invoice.paid", "created": 1793491200, "data": {"object": {"id": "in_1", "object": "invoice"}}}`), "ignored"},
		{"unpaid subscription loses the paid tier", subEvent("evt_p", "customer.subscription.updated", now, map[string]any{"customer": "cus_out", "status": "unpaid"}), "applied"},
	}
	for _, tt := range tests {
		r := b.deliver(tt.payload).want(t, 200, "")
		if r.body["outcome"] != tt.outcome {
			t.Errorf("%s: outcome %v, want %s", tt.name, r.body["outcome"], tt.outcome)
		}
	}
	if a := b.accountJSON(key); a["tier"] != "free" || a["subscription_status"] != "unpaid" {
		t.Errorf("unpaid: %v", a)
	}
}

func TestStripeWebhookRejects(t *testing.T) {
	t.Parallel()
	b := setup(t, stripeEnv)
	_, key := b.account(plan.Scale, "cus_rej")
	good := subEvent("evt_r", "customer.subscription.deleted", time.Now(), map[string]any{"customer": "cus_rej"})
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: whsec, Timestamp: time.Now().Add(-time.Hour)})
	// Signed 10 minutes ahead: stripe-go checks only the past; the tolerance holds both ways.
	future := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: whsec, Timestamp: time.Now().Add(10 * time.Minute)})
	wrong := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: "whsec_other"})
	tampered := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: append([]byte(" "), good...), Secret: whsec})
	for name, sig := range map[string]string{
		"no signature": "", "malformed": "garbage", "wrong secret": wrong.Header, "too old": old.Header, "other body": tampered.Header,
		"in the future": future.Header,
	} {
		t.Run(name, func(t *testing.T) {
			var headers []string
			if sig != "" {
				headers = []string{"Stripe-Signature", sig}
			}
			r := b.call(http.MethodPost, "/v1/stripe/webhook", "", good, headers...).want(t, 400, CodeInvalidRequest)
			if r.body["message"] == "" {
				t.Error("no message")
			}
		})
	}
	// A signed event whose subscription has no customer is a 400, and is not recorded as done.
	bad := subEvent("evt_bad", "customer.subscription.updated", time.Now(), nil)
	b.deliver(bad).want(t, 400, CodeInvalidRequest)
	// So are values an account cannot hold: a time past the year 9999, or an id of 1.5 MB,
	// which the answer does not echo back.
	b.deliver(subEvent("evt_far", "customer.subscription.updated", time.Unix(253402300800, 0), map[string]any{"customer": "cus_rej"})).
		want(t, 400, CodeInvalidRequest)
	b.deliver(subEvent("evt_period", "customer.subscription.updated", time.Now(),
		map[string]any{"customer": "cus_rej", "current_period_end": int64(1) << 40})).want(t, 400, CodeInvalidRequest)
	if r := b.deliver(subEvent("evt_"+strings.Repeat("x", 1_500_000), "customer.subscription.updated", time.Now(),
		map[string]any{"customer": "cus_rej"})).want(t, 400, CodeInvalidRequest); len(r.raw) > 4096 {
		t.Errorf("the refusal of a 1.5 MB id is %d bytes long", len(r.raw))
	}
	// Text that is not UTF-8 is refused like anywhere else in the API, not stored as U+FFFD.
	notUTF8 := bytes.Replace(subEvent("evt_UTF8", "customer.subscription.updated", time.Now(), map[string]any{"customer": "cus_rej"}),
		[]byte("UTF8"), []byte("\xff\xfe"), 1)
	if r := b.deliver(notUTF8).want(t, 400, CodeInvalidRequest); !strings.Contains(fmt.Sprint(r.body["message"]), "UTF-8") {
		t.Errorf("an event with bytes that are not UTF-8: %v", r.body["message"])
	}
	var n int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events`).Scan(&n))
	if n != 0 {
		t.Errorf("rejected events were recorded: %d", n)
	}
	if a := b.accountJSON(key); a["tier"] != "scale" {
		t.Errorf("a rejected event changed the account: %v", a)
	}

	// Without a configured secret the endpoint refuses everything.
	unconfigured := setup(t, nil)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: good, Secret: whsec})
	unconfigured.call(http.MethodPost, "/v1/stripe/webhook", "", good, "Stripe-Signature", signed.Header).want(t, 503, CodeServiceUnavailable)
}

// A downgrade that leaves the account with more keys than its new tier allows revokes none: every
// key keeps working, the key list shows the count above the maximum, and no key can be created
// until revocations bring the count below it (docs/api.md, "POST /v1/management/keys"). The new
// tier's limits apply from the next request.
func TestDowngradeKeepsKeysAboveTheNewMaximum(t *testing.T) {
	t.Parallel()
	b := setup(t, stripeEnv)
	a, mgmt := b.account(plan.Free, "cus_down")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	b.deliver(subEvent("evt_d1", "customer.subscription.created", t0, map[string]any{
		"id": "sub_down", "customer": "cus_down",
		"items": map[string]any{"object": "list", "data": []any{
			map[string]any{"id": "si_1", "object": "subscription_item", "price": map[string]any{"id": priceScale, "object": "price"}}}},
	})).want(t, 200, "")
	var keys, raws []string
	for range 7 {
		k := b.standardKey(a.ID)
		keys, raws = append(keys, k.ID), append(raws, k.Raw)
	}
	// Scale → builder in the billing portal (builder allows 5 keys).
	b.deliver(subEvent("evt_d2", "customer.subscription.updated", t0.Add(time.Minute), map[string]any{
		"id": "sub_down", "customer": "cus_down"})).want(t, 200, "")
	acct := b.accountJSON(mgmt)
	if acct["tier"] != "builder" || acct["limits"].(map[string]any)["max_keys"] != float64(5) ||
		acct["limits"].(map[string]any)["rate_limit_per_min"] != float64(100) {
		t.Fatalf("after the downgrade: %v", acct)
	}
	list := b.call(http.MethodGet, "/v1/management/keys", mgmt, nil).want(t, 200, "")
	if list.body["count"] != float64(7) || list.body["max"] != float64(5) {
		t.Fatalf("key list after the downgrade: count %v, max %v; want 7 of 5", list.body["count"], list.body["max"])
	}
	var active int
	mustOK(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard' AND revoked_at IS NULL`,
		a.ID).Scan(&active))
	if active != 7 {
		t.Fatalf("%d standard keys active after the downgrade, want all 7", active)
	}
	for _, raw := range raws {
		b.call(http.MethodGet, "/v1/email/lists", raw, nil).want(t, 200, "")
	}
	create := func() reply {
		return b.call(http.MethodPost, "/v1/management/keys", mgmt, map[string]any{"label": "more"})
	}
	create().want(t, 429, CodeKeyLimitReached)
	for _, id := range keys[:2] {
		b.call(http.MethodDelete, "/v1/management/keys/"+id, mgmt, nil).want(t, 204, "")
	}
	create().want(t, 429, CodeKeyLimitReached) // 5 of 5
	b.call(http.MethodDelete, "/v1/management/keys/"+keys[2], mgmt, nil).want(t, 204, "")
	create().want(t, 201, "")
}
