package verification

import (
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/usage"
)

func TestHeadroom(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 30, 15, 0, time.UTC)
	h := newHeadroom()
	if h.Take("a", now) {
		t.Fatal("room without a decision")
	}
	h.Note("a", now, usage.Decision{Room: 2}, nil)
	if !h.Take("a", now) || !h.Take("a", now.Add(10*time.Second)) || h.Take("a", now) {
		t.Fatal("two units of room, taken once each")
	}
	h.Note("a", now, usage.Decision{Room: 5}, nil)
	if h.Take("a", now.Add(time.Minute)) {
		t.Fatal("room carried into the next window")
	}
	h.Note("a", now, usage.Decision{Room: 5}, &usage.RateLimited{})
	if h.Take("a", now) || h.Take("b", now) {
		t.Fatal("room after a refusal, or for another account")
	}
}
