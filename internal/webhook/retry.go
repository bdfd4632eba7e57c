package webhook

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxBackoff is the longest wait of the retry schedule (docs/api.md, "Retries"), before jitter.
// A receiver's Retry-After is honoured up to it.
const MaxBackoff = 30 * time.Second

// Backoff is the wait before attempt n+1 after attempt n failed (docs/api.md, "Retries"):
// min(1000·2^(n−1), 30000) ms plus a random 0–599 ms, so about 1.0–1.6 s after the first failure
// and 2.0–2.6 s after the second.
func Backoff(n int) time.Duration {
	return backoffBase(n) + time.Duration(rand.IntN(600))*time.Millisecond
}

func backoffBase(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	ms := int(MaxBackoff / time.Millisecond)
	if n <= 15 { // 2^15 s is far past the cap; avoids shifting into overflow
		ms = min(1000<<(n-1), ms)
	}
	return time.Duration(ms) * time.Millisecond
}

// outcome is how one attempt ended, and what it means for the delivery.
type outcome int

const (
	outcomeDelivered outcome = iota // 2xx
	outcomeRetry                    // transport error, 429 or 5xx with attempts left
	outcomeFailed                   // final failure
)

// classify applies the retry rules (docs/api.md, "Retries") to attempt n: status is the HTTP status (0 when none
// came back), transportErr tells a network failure that may be retried, final a refusal that must
// not be (a forbidden address, a URL that breaks the rules). A 429 is the receiver asking for
// time, not refusing the callback, so it is retried like a 5xx; every other 4xx (410 Gone
// included) and every 3xx is final.
func classify(n, status int, transportErr, final bool) outcome {
	switch {
	case status >= 200 && status <= 299:
		return outcomeDelivered
	case final:
		return outcomeFailed
	case (transportErr || status == http.StatusTooManyRequests || status >= 500 && status <= 599) && n < MaxAttempts:
		return outcomeRetry
	default:
		return outcomeFailed
	}
}

// retryAfter is how long a Retry-After header value asks to wait, read at now: delta-seconds or
// an HTTP date, capped at MaxBackoff so that a receiver cannot hold a delivery, and the
// worker's message for it, for longer than the schedule ever would (docs/api.md, "Retries").
// An absent, malformed or past value asks for nothing (0).
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return MaxBackoff
		case err != nil:
			return 0
		case secs >= uint64(MaxBackoff/time.Second):
			return MaxBackoff
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(at.Sub(now), 0), MaxBackoff)
}
