// Package loop runs the periodic tasks of Mailvet's processes (outbox sweeps, retention, pruning)
// with the same start and stop semantics as the queue consumers (queue.Consumer): they run until
// their context ends, a run in progress is finished rather than cut, and they return nil on a
// clean stop, so app.Infra.Run can treat every long-running part alike.
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
