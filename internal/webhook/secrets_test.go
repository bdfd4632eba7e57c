package webhook

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/sealed"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// storedSecret is a delivery's webhook_secret column (nil: erased or never set).
func (b *bundle) storedSecret(t testing.TB, id uuid.UUID) *string {
	t.Helper()
	var v *string
	pgtest.Must(t, b.pool.QueryRow(context.Background(), `SELECT webhook_secret FROM deliveries WHERE id = $1`, id).Scan(&v), "secret")
	return v
}

// A delivery keeps its sealed secret while an attempt or a replay may need it, and no longer
// (outbox.go, CreateDelivery): a failed delivery keeps it, a replay carries it, and once the
// replay is delivered both are erased. Every attempt is signed from the sealed secret, and the
// delivery log still says "signed" afterwards.
func TestSecretErasedOnceDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := newReceiver(t, statuses(404, 200))
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	const secret = "erase-me-when-done"
	orig := b.create(t, b.accountID, rc.url("/cb"), secret, sampleBody, true)
	if v := b.storedSecret(t, orig); v == nil || !sealed.IsSealed(*v) || strings.Contains(*v, secret) {
		t.Fatalf("stored secret %v, want a sealed value", v)
	}
	if r := b.waitFinal(t, orig, 15*time.Second); r.state != StateFailed || r.signature == nil {
		t.Fatalf("original %+v, want failed on the 404 with its signature recorded", r)
	}
	if b.storedSecret(t, orig) == nil {
		t.Fatal("a failed delivery lost its secret: a replay could not be signed")
	}
	rep, err := Replay(ctx, b.pool, b.js, queue.Layout{}, b.accountID, orig, replayEvent(b.accountID))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.waitFinal(t, rep, 15*time.Second); r.state != StateDelivered {
		t.Fatalf("replay %+v, want delivered", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.storedSecret(t, rep) != nil || b.storedSecret(t, orig) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("secrets kept after the replay was delivered: replay %v, original %v", b.storedSecret(t, rep) != nil, b.storedSecret(t, orig) != nil)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hits := rc.snapshot()
	if len(hits) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(hits))
	}
	for i, h := range hits {
		if err := Verify([]byte(secret), h.body, h.header.Get(SignatureHeader)); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
	page, err := ListDeliveries(ctx, b.pool, b.accountID, ListFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range page.Deliveries {
		if !d.Signed {
			t.Errorf("delivery %s no longer shows as signed once its secret is erased", d.ID)
		}
	}
}

// A delivery whose secret this worker cannot open (sealed under a key it does not hold) is never
// sent unsigned: the attempt fails with a text that names no key, and is retried.
func TestUnopenableSecretIsNotSentUnsigned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(200))
	other, _ := sealed.New(bytes.Repeat([]byte{9}, sealed.KeySize), nil)
	v, _ := other.Seal("a-secret-of-another-key")
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := CreateDelivery(ctx, tx, b.jobID, b.accountID, rc.url("/cb"), v, sampleBody)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Publish(ctx, b.js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	deadline := time.Now().Add(10 * time.Second)
	for b.row(t, id).attempts == 0 || len(b.attempts(t, id)) == 0 || b.attempts(t, id)[0].err == nil ||
		strings.HasPrefix(*b.attempts(t, id)[0].err, "interrupted") {
		if time.Now().After(deadline) {
			t.Fatalf("no attempt recorded: %+v", b.row(t, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rc.snapshot()); n != 0 {
		t.Fatalf("receiver got %d requests from a delivery that could not be signed", n)
	}
	as := b.attempts(t, id)
	if msg := *as[0].err; !strings.Contains(msg, "could not be signed") || strings.Contains(msg, "MAILVET") {
		t.Errorf("attempt error %q", msg)
	}
	if r := b.row(t, id); r.state != StateRetrying && r.state != StateFailed {
		t.Errorf("state %s", r.state)
	}
}

// Reseal moves every stored secret under the current key: values under the old key and plain ones
// stored before sealing; values under an unknown key are left alone. Two replicas running it at
// once split the work and reseal each value once.
func TestResealRotates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	oldKey, newKey := bytes.Repeat([]byte{1}, sealed.KeySize), bytes.Repeat([]byte{2}, sealed.KeySize)
	before, _ := sealed.New(oldKey, nil)
	rotating, _ := sealed.New(newKey, oldKey)
	stranger, _ := sealed.New(bytes.Repeat([]byte{3}, sealed.KeySize), nil)

	want := map[uuid.UUID]string{}
	seal := func(k *sealed.Keys, s string) string {
		v, err := k.Seal(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := range 30 {
		secret := "secret-" + uuid.NewString()
		v := secret // every third one plain, as stored before 00023
		if i%3 != 0 {
			v = seal(before, secret)
		}
		id := uuid.New()
		pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, webhook_secret, state)
			VALUES ($1, $2, 'a@example.com', 'https://hooks.test/', $3, 'pending')`, id, b.accountID, v)
		want[id] = secret
	}
	listID := uuid.New()
	pgtest.Exec(t, b.pool, `INSERT INTO lists (id, account_id, name, format, columns, email_column, webhook_url, webhook_secret)
		VALUES ($1, $2, 'l', 'csv', '{email}', 0, 'https://hooks.test/', $3)`, listID, b.accountID, seal(before, "list-secret-1"))
	want[listID] = "list-secret-1"
	del := b.create(t, b.accountID, "https://hooks.test/cb", "", sampleBody, false)
	pgtest.Exec(t, b.pool, `UPDATE deliveries SET webhook_secret = $2 WHERE id = $1`, del, seal(before, "delivery-secret-1"))
	want[del] = "delivery-secret-1"
	strangerJob := uuid.New()
	strangerValue := seal(stranger, "not-ours")
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, webhook_secret, state)
		VALUES ($1, $2, 'a@example.com', 'https://hooks.test/', $3, 'pending')`, strangerJob, b.accountID, strangerValue)

	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := Reseal(ctx, b.pool, rotating, 7)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += n
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if total != len(want) {
		t.Errorf("resealed %d values, want %d (each once)", total, len(want))
	}
	after, _ := sealed.New(newKey, nil) // the old key retired
	for id, secret := range want {
		var v string
		pgtest.Must(t, b.pool.QueryRow(ctx, `SELECT webhook_secret FROM jobs WHERE id = $1
			UNION ALL SELECT webhook_secret FROM lists WHERE id = $1
			UNION ALL SELECT webhook_secret FROM deliveries WHERE id = $1`, id).Scan(&v), "value")
		if got, err := after.Open(v); err != nil || got != secret || !after.Current(v) {
			t.Errorf("%s: %q opens to %q, %v under the new key alone", id, v, got, err)
		}
	}
	var v string
	pgtest.Must(t, b.pool.QueryRow(ctx, `SELECT webhook_secret FROM jobs WHERE id = $1`, strangerJob).Scan(&v), "stranger")
	if v != strangerValue {
		t.Error("a value under an unknown key was changed")
	}
	if n, err := Reseal(ctx, b.pool, rotating, 100); err != nil || n != 0 {
		t.Errorf("a second pass resealed %d (%v), want 0", n, err)
	}
}
