package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/verdict"
)

// Items a worker answers and acknowledges while the dispatcher checks which missing items are
// gone from VERIFY (its stall check) are not published again: the check finds them gone, but
// their answers reached the inbox before the check's own answer did, and the dispatcher reads
// them before deciding. Published again, each would be probed a second time at its mail server
// (docs/reliability.md, "Batch and stream items"). The worker acts from the proxy, at the moment
// the check's stream-info request leaves the API and before NATS sees it.
func TestItemsAnsweredDuringTheStallCheckAreNotPublishedAgain(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	wnc, wjs := natstest.ConnectTo(t, s.ClientURL()) // the worker, connected directly
	proxy, anc, ajs := natstest.Proxied(t, s.ClientURL(), "api-under-test")
	d := queue.NewDispatcher(anc, ajs, queue.Layout{})
	defer d.Close()
	d.StallAfter = 500 * time.Millisecond

	// Every copy of every item, as NATS routes it to the stream.
	copies, err := wnc.SubscribeSync(queue.SubjectVerifyItems)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := queue.VerifyItemsConsumer(2, 30*time.Second)
	cons, err := wjs.CreateOrUpdateConsumer(ctx, spec.Stream, spec.Config)
	if err != nil {
		t.Fatal(err)
	}

	emails := []string{"a@example.com", "b@example.com"}
	type outcome struct {
		missing []int
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		m, err := d.VerifyMany(ctx, emails, nil)
		done <- outcome{m, err}
	}()

	// The worker takes every item and holds it: the batch hears nothing, and its stall check comes.
	var held []jetstream.Msg
	for len(held) < len(emails) && ctx.Err() == nil {
		batch, err := cons.Fetch(len(emails)-len(held), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			held = append(held, m)
		}
	}
	if len(held) != len(emails) {
		t.Fatalf("the worker took %d items, want %d", len(held), len(emails))
	}

	// When the check's request leaves the API, the worker answers every item as
	// internal/verifyworker does, the reply before the ack, and its ack is confirmed before the
	// request reaches NATS: the check finds both items gone.
	checked := make(chan struct{})
	var once sync.Once
	var tail []byte // a subject may span two chunks
	proxy.BeforeSend(func(chunk []byte) {
		sent := append(tail, chunk...)
		tail = append([]byte(nil), sent[max(0, len(sent)-64):]...)
		if !bytes.Contains(sent, []byte("$JS.API.STREAM.INFO.")) {
			return
		}
		once.Do(func() {
			for _, m := range held {
				answer(t, ctx, wnc, m)
			}
			close(checked)
		})
	})

	select {
	case o := <-done:
		if o.err != nil || len(o.missing) > 0 {
			t.Fatalf("VerifyMany: missing %v, %v; want every item answered", o.missing, o.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("VerifyMany did not return")
	}
	select {
	case <-checked:
	default:
		t.Fatal("the batch was answered without a stall check: the test proves nothing")
	}

	// Every publish reached the subscriber before its PubAck reached the API; Flush makes sure
	// the subscriber has read them all.
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	perIndex := map[string]int{}
	for {
		m, err := copies.NextMsg(100 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		perIndex[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]++
	}
	for _, i := range []string{"0", "1"} {
		if perIndex[i] != 1 {
			t.Errorf("item %s published %d times, want once (its answer was already in)", i, perIndex[i])
		}
	}
}

// answer replies to item m on its reply inbox, then acknowledges it and waits for NATS to confirm.
func answer(t *testing.T, ctx context.Context, nc *nats.Conn, m jetstream.Msg) {
	t.Helper()
	var req queue.VerifyRequest
	if err := json.Unmarshal(m.Data(), &req); err != nil {
		t.Error(err)
		return
	}
	body, _ := json.Marshal(queue.VerifyReply{Index: req.Index, Result: &verdict.Result{Email: req.Email}})
	if err := nc.Publish(m.Headers().Get(queue.HeaderReply), body); err != nil {
		t.Error(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Error(err)
	}
}
