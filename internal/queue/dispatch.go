package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/mailvet/mailvet/internal/verify"
)

// Errors the API turns into 503 service_unavailable.
var (
	// ErrNoWorkers: no verifier worker is subscribed at all.
	ErrNoWorkers = errors.New("no verifier worker is running")
	// ErrBusy: the workers are saturated, or the work queue is full.
	ErrBusy = errors.New("verifier workers are saturated")
	// ErrTimeout: the workers did not answer before the deadline.
	ErrTimeout = errors.New("verifier workers did not answer in time")
)

// Dispatcher hands verification work from the API to the verifier workers.
type Dispatcher struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// VerifyOne verifies one address by core request/reply: the lowest-latency path, with nothing
// persisted because the caller is waiting and retries on failure.
func (d *Dispatcher) VerifyOne(ctx context.Context, email string) (verify.Result, error) {
	body, _ := json.Marshal(VerifyRequest{Email: email})
	msg := nats.NewMsg(SubjectVerifySync)
	msg.Data = body
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(HeaderDeadline, strconv.FormatInt(dl.UnixMilli(), 10))
	}
	resp, err := d.NC.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return verify.Result{}, ErrNoWorkers
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return verify.Result{}, ErrTimeout
	case err != nil:
		return verify.Result{}, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	var r VerifyReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return verify.Result{}, fmt.Errorf("decode worker reply: %w", err)
	}
	if r.Result == nil {
		return verify.Result{}, ErrBusy
	}
	return *r.Result, nil
}

// VerifyMany publishes one durable JetStream item per address and calls each as results arrive
// on this replica's inbox, in completion order. Items survive a worker crash (they are
// redelivered), so a batch completes even if a worker dies mid-way. Each index is reported at
// most once, even when a redelivered item is answered twice. It returns when every item has
// answered, or with ErrTimeout (and the indexes still missing) when ctx ends first.
func (d *Dispatcher) VerifyMany(ctx context.Context, emails []string, each func(i int, r verify.Result)) (missing []int, err error) {
	inbox := d.NC.NewRespInbox()
	replies := make(chan *nats.Msg, len(emails))
	sub, err := d.NC.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	defer sub.Unsubscribe()

	deadline := ""
	if dl, ok := ctx.Deadline(); ok {
		deadline = strconv.FormatInt(dl.UnixMilli(), 10)
	}
	batch := nuid.Next()
	futures := make([]jetstream.PubAckFuture, 0, len(emails))
	for i, e := range emails {
		body, _ := json.Marshal(VerifyRequest{Email: e, Index: i})
		msg := nats.NewMsg(SubjectVerifyItemPrefix + batch + "." + strconv.Itoa(i))
		msg.Data = body
		msg.Header.Set(HeaderReply, inbox)
		if deadline != "" {
			msg.Header.Set(HeaderDeadline, deadline)
		}
		f, err := d.JS.PublishMsgAsync(msg, jetstream.WithMsgID(batch+"."+strconv.Itoa(i)))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBusy, err)
		}
		futures = append(futures, f)
	}
	// Every item must be stored before we wait for answers: a full stream (DiscardNew) refuses
	// new items, which is the queue telling us to push back.
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if strings.Contains(err.Error(), "maximum") || errors.Is(err, jetstream.ErrNoStreamResponse) {
				return nil, ErrBusy
			}
			return nil, fmt.Errorf("%w: %v", ErrBusy, err)
		case <-ctx.Done():
			return nil, ErrTimeout
		}
	}

	done := make([]bool, len(emails))
	left := len(emails)
	for left > 0 {
		select {
		case m := <-replies:
			var r VerifyReply
			if json.Unmarshal(m.Data, &r) != nil || r.Result == nil || r.Index < 0 || r.Index >= len(emails) || done[r.Index] {
				continue
			}
			done[r.Index] = true
			left--
			if each != nil {
				each(r.Index, *r.Result)
			}
		case <-ctx.Done():
			for i, ok := range done {
				if !ok {
					missing = append(missing, i)
				}
			}
			return missing, ErrTimeout
		}
	}
	return nil, nil
}

// Deadline reads the HeaderDeadline of msg; ok is false when it has none.
func Deadline(msg *nats.Msg) (time.Time, bool) {
	ms, err := strconv.ParseInt(msg.Header.Get(HeaderDeadline), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// PublishJob queues an async job whose row is already stored. The job id is the message id, so
// a retried publish of the same job is stored once.
func PublishJob(ctx context.Context, js jetstream.JetStream, jobID uuid.UUID) error {
	body, _ := json.Marshal(JobMessage{JobID: jobID})
	if _, err := js.Publish(ctx, SubjectJob, body, jetstream.WithMsgID("job."+jobID.String())); err != nil {
		return fmt.Errorf("%w: queue job: %v", ErrBusy, err)
	}
	return nil
}

// WorkersAlive reports whether any verifier worker is pulling batch items right now: a live
// worker always keeps a pull request open, so none waiting means nobody would answer.
func (d *Dispatcher) WorkersAlive(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := d.JS.Consumer(cctx, StreamVerify, ConsumerVerifiers)
	if err != nil {
		return false
	}
	info, err := c.Info(cctx)
	return err == nil && info.NumWaiting > 0
}
