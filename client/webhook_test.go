package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
	"github.com/mailvet/mailvet/webhook"
)

// VerifyWebhook accepts the shared Standard Webhooks golden vectors at their own time, refuses
// them once outside the tolerance, and falls back to X-Service-Signature unless told not to.
func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../internal/webhook/testdata/standard-signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct{ Secret, ID, Timestamp, Body, Signature string }
	if err := json.Unmarshal(raw, &vs); err != nil || len(vs) < 5 {
		t.Fatalf("vectors: %v (%d)", err, len(vs))
	}
	for _, v := range vs {
		ts, _ := strconv.ParseInt(v.Timestamp, 10, 64)
		sent := time.Unix(ts, 0)
		h := http.Header{}
		h.Set("webhook-id", v.ID)
		h.Set("webhook-timestamp", v.Timestamp)
		h.Set("webhook-signature", v.Signature)
		at := func(d time.Duration) client.WebhookOptions {
			return client.WebhookOptions{Now: func() time.Time { return sent.Add(d) }}
		}
		if err := client.VerifyWebhook(h, []byte(v.Body), v.Secret, at(4*time.Minute)); err != nil {
			t.Errorf("vector %s: %v", v.ID, err)
		}
		if err := client.VerifyWebhook(h, []byte(v.Body), v.Secret, at(-6*time.Minute)); !errors.Is(err, webhook.ErrTimestamp) {
			t.Errorf("vector %s six minutes early: %v", v.ID, err)
		}
		if err := client.VerifyWebhook(h, []byte(v.Body), v.Secret, at(6*time.Minute)); !errors.Is(err, webhook.ErrTimestamp) {
			t.Errorf("vector %s replayed after six minutes: %v", v.ID, err)
		}
		if err := client.VerifyWebhook(h, []byte(v.Body), v.Secret, client.WebhookOptions{Now: at(10 * time.Minute).Now, Tolerance: 15 * time.Minute}); err != nil {
			t.Errorf("vector %s within a 15 minute tolerance: %v", v.ID, err)
		}
	}
	body := []byte(`{"job_id":"x"}`)
	legacy := http.Header{}
	legacy.Set("X-Service-Signature", webhook.Sign(body, "at-least-8-chars"))
	if err := client.VerifyWebhook(legacy, body, "at-least-8-chars", client.WebhookOptions{}); err != nil {
		t.Errorf("X-Service-Signature alone: %v", err)
	}
	if err := client.VerifyWebhook(legacy, body, "at-least-8-chars", client.WebhookOptions{RequireStandard: true}); !errors.Is(err, webhook.ErrMissing) {
		t.Errorf("X-Service-Signature alone, standard required: %v", err)
	}
}
