package list_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// A list read while its chunks are being written shows counts that add up to its verified, in
// Get (GET /v1/email/lists/{id}, the dashboard's list page) and in Page (the lists' index): the
// writer changes both in one transaction, and the readers read both in one snapshot.
func TestCountsAddUpWhileAListRuns(t *testing.T) {
	t.Parallel()
	cfg := list.Defaults()
	cfg.ChunkSize, cfg.Window = 2, 4
	s, a := fixture(t, cfg)
	ctx := context.Background()
	l := importText(t, s, a, 300)
	queue, err := s.Start(ctx, l.AccountID)
	pgtest.Must(t, err, "start")

	var done atomic.Bool
	var reads, bad atomic.Int64
	check := func(got list.List) {
		sum := 0
		for _, c := range got.Counts {
			sum += c.N
		}
		reads.Add(1)
		if sum != got.Verified {
			if bad.Add(1) == 1 {
				t.Errorf("list read with verified %d but counts adding up to %d", got.Verified, sum)
			}
		}
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load() && i < 100_000; i++ {
				got, err := s.Get(ctx, a.ID, l.ID)
				if err != nil {
					t.Errorf("get: %v", err) // not Fatal: this is not the test's goroutine
					return
				}
				check(got)
				page, _, err := s.Page(ctx, a.ID, nil, 10)
				if err != nil {
					t.Errorf("page: %v", err)
					return
				}
				for _, p := range page {
					check(p)
				}
			}
		}()
	}
	for len(queue) > 0 {
		out := deliver(t, s, queue[0])
		queue = append(queue[1:], out.Next...)
	}
	done.Store(true)
	wg.Wait()
	if got, _ := s.Get(ctx, a.ID, l.ID); got.State != list.Completed || got.Verified != 300 {
		t.Fatalf("list at the end: %s, %d verified", got.State, got.Verified)
	}
	t.Logf("%d reads during 150 chunk writes, %d inconsistent", reads.Load(), bad.Load())
}
