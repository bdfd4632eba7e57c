package webhook

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/webhook"
)

// A real delivery to a loopback HTTPS receiver, retried once, carries both schemes on every
// attempt: X-Service-Signature unchanged, and Standard Webhooks headers with one webhook-id for
// the delivery and each attempt's own timestamp. The receiver's checks (the public package's and
// the adapter's) accept them; the same request replayed outside the tolerance is refused.
func TestDeliveryCarriesBothSchemes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(503, 200))
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	start := time.Now()
	id := b.create(t, b.accountID, rc.url("/cb"), secret, sampleBody, true)
	if r := b.waitFinal(t, id, 15*time.Second); r.state != StateDelivered || r.attempts != 2 {
		t.Fatalf("delivery %+v, want delivered on the second attempt", r)
	}
	hits := rc.snapshot()
	if len(hits) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(hits))
	}
	var stamps []int64
	for i, h := range hits {
		if err := Verify([]byte(secret), h.body, h.header.Get(SignatureHeader)); err != nil {
			t.Errorf("attempt %d X-Service-Signature: %v", i+1, err)
		}
		if got := h.header.Get("webhook-id"); got != id.String() || got != h.header.Get("X-Mailvet-Delivery") {
			t.Errorf("attempt %d webhook-id %q, want the delivery id %s", i+1, got, id)
		}
		ts, err := strconv.ParseInt(h.header.Get("webhook-timestamp"), 10, 64)
		if err != nil || ts < start.Unix() || ts > h.at.Unix()+1 {
			t.Errorf("attempt %d webhook-timestamp %q is not the attempt's time", i+1, h.header.Get("webhook-timestamp"))
		}
		stamps = append(stamps, ts)
		// Only the standard scheme: the headers a Standard Webhooks library reads.
		if err := webhook.VerifyRequest(h.header, h.body, secret, webhook.VerifyOptions{RequireStandard: true, Now: func() time.Time { return h.at }}); err != nil {
			t.Errorf("attempt %d Standard Webhooks signature: %v", i+1, err)
		}
		if err := VerifyWebhook([]byte(secret), h.body, h.header, h.at, 0); err != nil {
			t.Errorf("attempt %d VerifyWebhook: %v", i+1, err)
		}
		// The captured request sent again six minutes later is refused.
		if err := VerifyWebhook([]byte(secret), h.body, h.header, h.at.Add(6*time.Minute), 0); !errors.Is(err, ErrTimestamp) {
			t.Errorf("attempt %d replayed after 6 min: %v, want ErrTimestamp", i+1, err)
		}
		// Tampering with the timestamp to make the replay look fresh breaks the signature.
		forged := h.header.Clone()
		forged.Set("webhook-timestamp", strconv.FormatInt(h.at.Add(6*time.Minute).Unix(), 10))
		if err := VerifyWebhook([]byte(secret), h.body, forged, h.at.Add(6*time.Minute), 0); !errors.Is(err, ErrSignatureMismatch) {
			t.Errorf("attempt %d with a refreshed timestamp: %v, want a mismatch", i+1, err)
		}
	}
	if hits[0].header.Get("webhook-signature") == hits[1].header.Get("webhook-signature") && stamps[0] != stamps[1] {
		t.Error("two attempts at different times carry the same Standard Webhooks signature")
	}
}

// An unsigned delivery carries none of the signature headers.
func TestUnsignedDeliveryHasNoStandardHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, statuses(200))
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	b.waitFinal(t, id, 15*time.Second)
	for _, h := range rc.snapshot() {
		for _, name := range []string{SignatureHeader, "webhook-id", "webhook-timestamp", "webhook-signature"} {
			if _, ok := h.header[textproto.CanonicalMIMEHeaderKey(name)]; ok {
				t.Errorf("unsigned delivery carries %s", name)
			}
		}
	}
}

// A receiver may get the same callback more than once: an attempt cut off by a worker crash
// after it arrived is made again, and a failed delivery may be replayed. Every one of those
// requests carries the same webhook-id, the original delivery's id, and the same body bytes, so a
// receiver that deduplicates on webhook-id (as Standard Webhooks libraries do) processes it once;
// X-Mailvet-Delivery names the delivery each request belongs to (docs/api.md, "Signature").
func TestWebhookIDStableAcrossCrashRetryAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived1 := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			close(arrived1)
			<-r.Context().Done() // hang until the worker goes away
		case 2:
			w.WriteHeader(http.StatusGone)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	o := Options{AttemptTimeout: time.Second, AckWait: 4 * time.Second, DrainTimeout: time.Millisecond,
		Client: ClientOptions{AllowPrivate: true}}
	first := b.startWorker(t, o)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	id := b.create(t, b.accountID, rc.url("/cb"), secret, sampleBody, true)
	waitChan(t, arrived1, "attempt 1")
	first.stop() // DrainTimeout 1 ms: the attempt in flight is abandoned as in a crash
	b.startWorker(t, o)
	if r := b.waitFinal(t, id, 20*time.Second); r.state != StateFailed || r.attempts != 2 {
		t.Fatalf("delivery %+v, want failed after an interrupted attempt and a 410", r)
	}
	if as := b.attempts(t, id); len(as) != 2 || as[0].err == nil || *as[0].err != interruptedError {
		t.Fatalf("attempt log %+v, want interrupted then 410", as)
	}
	replay, err := Replay(context.Background(), b.pool, b.js, queue.Layout{}, b.accountID, id, replayEvent(b.accountID))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.waitFinal(t, replay, 15*time.Second); r.state != StateDelivered {
		t.Fatalf("replay %+v, want delivered", r)
	}
	hits := rc.snapshot()
	if len(hits) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(hits))
	}
	wantDelivery := []string{id.String(), id.String(), replay.String()}
	for i, h := range hits {
		if got := h.header.Get("webhook-id"); got != id.String() {
			t.Errorf("request %d webhook-id %q, want the original delivery's %s", i+1, got, id)
		}
		if got := h.header.Get("X-Mailvet-Delivery"); got != wantDelivery[i] {
			t.Errorf("request %d X-Mailvet-Delivery %q, want %s", i+1, got, wantDelivery[i])
		}
		if !bytes.Equal(h.body, sampleBody) {
			t.Errorf("request %d body %q, want the stored bytes", i+1, h.body)
		}
		if err := webhook.VerifyRequest(h.header, h.body, secret, webhook.VerifyOptions{RequireStandard: true, Now: func() time.Time { return h.at }}); err != nil {
			t.Errorf("request %d Standard Webhooks signature: %v", i+1, err)
		}
		if err := Verify([]byte(secret), h.body, h.header.Get(SignatureHeader)); err != nil {
			t.Errorf("request %d X-Service-Signature: %v", i+1, err)
		}
	}
}
