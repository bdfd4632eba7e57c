package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// TestLargestMessagesFitAndAFullStreamRefusesAtOnce: every message Mailvet publishes is one item,
// job, chunk or delivery, never a batch in one body, so the largest is a VERIFY item for a
// 254-byte address with its reply and deadline headers, far below the server's max_payload
// (1 MB by default). A stream that is full (DiscardNew; here by a tiny MaxBytes) refuses the
// next message at once: a batch ends with ErrBusy and a job with ErrUnavailable (503
// service_unavailable), both well within PublishTimeout, and the stream holds nothing more.
func TestLargestMessagesFitAndAFullStreamRefusesAtOnce(t *testing.T) {
	t.Parallel()
	nc, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l := queue.Layout{Prefix: "limits"}
	if err := queue.EnsureStreams(ctx, js, l, nil); err != nil {
		t.Fatal(err)
	}

	// The largest item: a 254-byte address, stored whole, with its headers.
	long := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 189) // 254 bytes
	d := queue.NewDispatcher(nc, js, l)
	defer d.Close()
	item := nats.NewMsg(l.Subject(queue.SubjectVerifyItemPrefix) + "probe.0")
	item.Data = []byte(`{"email":"` + long + `","index":999999}`)
	item.Header.Set(queue.HeaderReply, nc.NewRespInbox())
	item.Header.Set(queue.HeaderDeadline, "1893456000000")
	size := len(item.Subject) + len(item.Data) + 200 // headers, generously
	if max := nc.MaxPayload(); int64(size) > max/1000 {
		t.Fatalf("a VERIFY item takes up to %d bytes; max_payload is %d", size, max)
	}
	if _, err := js.PublishMsg(ctx, item); err != nil {
		t.Fatalf("the largest item: %v", err)
	}

	// Full streams: VERIFY and JOBS limited to what they hold now.
	for _, base := range []string{queue.StreamVerify, queue.StreamJobs} {
		s, err := js.Stream(ctx, l.Name(base))
		if err != nil {
			t.Fatal(err)
		}
		if base == queue.StreamJobs {
			if _, err := js.Publish(ctx, l.Subject(queue.SubjectJob), []byte(`{"job_id":"`+uuid.NewString()+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		cfg.MaxBytes = int64(info.State.Bytes)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(base string) uint64 {
		s, err := js.Stream(ctx, l.Name(base))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	start := time.Now()
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := d.VerifyMany(bctx, []string{"ann@example.com", "bob@example.com"}, nil)
	bcancel()
	if !errors.Is(err, queue.ErrBusy) || time.Since(start) > d.PublishTimeout {
		t.Errorf("a batch into a full VERIFY: %v after %v; want ErrBusy at once", err, time.Since(start))
	}
	if n := stored(queue.StreamVerify); n != 1 {
		t.Errorf("VERIFY holds %d messages, want still 1", n)
	}

	start = time.Now()
	err = d.PublishJob(ctx, uuid.New())
	if !errors.Is(err, queue.ErrUnavailable) || time.Since(start) > d.PublishTimeout {
		t.Errorf("a job into a full JOBS: %v after %v; want ErrUnavailable at once", err, time.Since(start))
	}
	if n := stored(queue.StreamJobs); n != 1 {
		t.Errorf("JOBS holds %d messages, want still 1", n)
	}
	var apiErr *jetstream.APIError
	if _, err := js.Publish(ctx, l.Subject(queue.SubjectJob), []byte(`{}`)); !errors.As(err, &apiErr) {
		t.Errorf("a publish into the full stream: %v, want the server's refusal", err)
	}
}
