package verification

import (
	"sync"
	"time"

	"github.com/mailvet/mailvet/internal/usage"
)

// headroom remembers, per account and on this replica only, how much the account's last
// admission left: rate-limit units in the current one-minute window and, below them, the free
// quota or the paid spend cap. It never admits anything. The service uses it to decide whether it may
// ask the worker fleet for an answer while Postgres is still admitting the request: with room
// left, a refusal is unlikely and its only cost is a verification nobody sees; without it (a
// throttled or exhausted account, or no recent decision) admission comes first, so such an
// account cannot make the fleet work.
type headroom struct {
	mu sync.Mutex
	m  map[string]room
}

type room struct {
	window time.Time // the rate window the decision was made in
	left   int
}

// headroomAccounts bounds the memory: past it, entries of earlier windows are dropped.
const headroomAccounts = 100_000

// newHeadroom returns an empty memory.
func newHeadroom() *headroom { return &headroom{m: map[string]room{}} }

// Take reports whether the account's last decision in now's rate window left room, and uses one
// unit of it, so that concurrent requests cannot all start early on the same room.
func (h *headroom) Take(account string, now time.Time) bool {
	w := now.UTC().Truncate(time.Minute)
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.m[account]
	if !ok || !r.window.Equal(w) || r.left <= 0 {
		return false
	}
	r.left--
	h.m[account] = r
	return true
}

// Note records the outcome of an admission made at now: the decision's room, or none after a
// refusal or failure.
func (h *headroom) Note(account string, now time.Time, d usage.Decision, err error) {
	w := now.UTC().Truncate(time.Minute)
	left := d.Room
	if err != nil {
		left = 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= headroomAccounts {
		for k, r := range h.m {
			if !r.window.Equal(w) {
				delete(h.m, k)
			}
		}
		if len(h.m) >= headroomAccounts {
			clear(h.m)
		}
	}
	h.m[account] = room{window: w, left: left}
}
