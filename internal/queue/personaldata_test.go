package queue_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// The only messages that carry an address are VERIFY's batch and stream items
// (docs/personal-data.md, "Where it is stored"): in memory, gone once a worker acknowledges
// them and after two minutes at most. JOBS, LISTS and WEBHOOKS carry ids only.
func TestOnlyVerifyItemsCarryAnAddressAndNotForLong(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, queue.StreamVerify)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.Retention != jetstream.WorkQueuePolicy || c.Storage != jetstream.MemoryStorage || c.MaxAge != 2*time.Minute {
		t.Fatalf("VERIFY: retention %v, storage %v, max age %v; want a work queue in memory for 2m", c.Retention, c.Storage, c.MaxAge)
	}
	addr := "ann@acme.example"
	body, _ := json.Marshal(queue.VerifyRequest{Email: addr})
	if _, err := js.Publish(ctx, queue.SubjectVerifyItemPrefix+"b1.0", body); err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetMsg(ctx, 1)
	if err != nil || !strings.Contains(string(stored.Data), addr) {
		t.Fatalf("the item as stored: %s, %v", stored.Data, err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, queue.VerifyItemsConsumer(1, 5*time.Second).Config)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if info, err = s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("after the ack VERIFY holds %d messages (%v); want none", info.State.Msgs, err)
	}
	// The durable streams carry ids: their message types have no field for an address.
	for _, v := range []any{queue.JobMessage{}, queue.ChunkMessage{}, queue.DeliveryMessage{}} {
		b, _ := json.Marshal(v)
		if strings.Contains(strings.ToLower(string(b)), "email") {
			t.Errorf("%T has an email field: %s", v, b)
		}
	}
}

// The inventory of docs/personal-data.md ("Where it is stored"): every stream is a work queue,
// so an acknowledged message is gone from it, and every bucket forgets its keys after its TTL.
func TestEveryStreamIsAWorkQueueAndEveryBucketForgets(t *testing.T) {
	for _, c := range queue.StreamConfigs(queue.Layout{}) {
		if c.Retention != jetstream.WorkQueuePolicy {
			t.Errorf("stream %s: retention %v; want a work queue", c.Name, c.Retention)
		}
		if c.Name == queue.StreamVerify && (c.Storage != jetstream.MemoryStorage || c.MaxAge != 2*time.Minute) {
			t.Errorf("VERIFY: storage %v, max age %v; want memory, 2m", c.Storage, c.MaxAge)
		}
	}
	want := map[string]time.Duration{queue.BucketSMTPSlots: queue.SlotLeaseTTL, queue.BucketMX: 6 * time.Hour, queue.BucketCatchAll: 6 * time.Hour}
	for _, b := range queue.BucketConfigs(queue.Layout{}, 0) {
		if b.TTL != want[b.Bucket] {
			t.Errorf("bucket %s: TTL %v; want %v", b.Bucket, b.TTL, want[b.Bucket])
		}
		delete(want, b.Bucket)
	}
	if len(want) != 0 {
		t.Errorf("buckets missing: %v", want)
	}
}
