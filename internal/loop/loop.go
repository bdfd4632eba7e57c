// Package loop holds the two shapes of Mailvet's background loops. Every runs the periodic tasks
// (outbox sweeps, retention, pruning) with the same start and stop semantics as the queue
// consumers (queue.Consumer): they run until their context ends, a run in progress is finished
// rather than cut, and they return nil on a clean stop, so app.Infra.Run can treat every
// long-running part alike. Gather is the batching step of the loops that drain a channel: take
// one item, then whatever else has piled up meanwhile, and handle them together.
package loop

import (
	"context"
	"time"
)

// Every runs task every interval until ctx ends. Runs never overlap: a run that takes longer than
// interval delays the next one. The first run is one interval after the start. Every returns nil
// once ctx has ended and the run in progress, if any, has returned; task should honour ctx.
func Every(ctx context.Context, interval time.Duration, task func(ctx context.Context)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			task(ctx)
		}
	}
}

// Gather appends to batch what is already waiting on in, up to max items in all, without waiting
// for more. A loop that receives one item and then gathers handles a burst in one go (one
// statement, one flush, one VerifyBatch) and a lone item without delay.
func Gather[T any](batch []T, in <-chan T, max int) []T {
	for len(batch) < max {
		select {
		case x, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, x)
		default:
			return batch
		}
	}
	return batch
}
