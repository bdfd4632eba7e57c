package smtp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// A server slower than the probe budget (a tarpit, or one overloaded) is still working on a
// session's commands when the session gives up on them. Closing then and opening another would
// leave the server a connection it still counts for every session abandoned, and the slower the
// server the more of them: the session keeps its place among MaxPerHost until the server has
// answered what it was sent, and the server never sees more than MaxPerHost connections. The
// addresses are answered unknown within their budget all the same.
func TestServerSlowerThanTheBudgetNeverSeesMoreThanMaxPerHost(t *testing.T) {
	t.Parallel()
	const maxPerHost = 2
	const budget = 300 * time.Millisecond
	b := setup(t, 0, Config{Timeout: budget, MaxPerHost: maxPerHost})
	s := b.server(t, mailsim.ServerOptions{Name: "mx.slow.test", ReplyDelay: 400 * time.Millisecond})
	b.w.AddDomain("slow.test", mailsim.Domain{Users: []string{"ann"}})
	for round := range 5 {
		var reqs []Request
		for i := range 10 {
			reqs = append(reqs, Request{Addr: fmt.Sprintf("u%d-%d@slow.test", round, i), Domain: "slow.test", Hosts: hosts(s)})
		}
		start := time.Now()
		for _, r := range b.p.ProbeAll(context.Background(), reqs, nil) {
			if r.Verdict != Unknown || !errors.Is(r.Err, ErrTimeout) {
				t.Fatalf("round %d: %+v, want unknown (timeout)", round, r)
			}
		}
		if took := time.Since(start); took > 2*budget {
			t.Errorf("round %d took %s, budget %s", round, took, budget)
		}
	}
	st := s.Stats()
	if st.PeakConcurrent > maxPerHost {
		t.Errorf("the slow server saw %d connections at once (%d opened), over MaxPerHost %d", st.PeakConcurrent, st.Sessions, maxPerHost)
	}
}
