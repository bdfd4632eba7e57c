package webhook

import (
	"math/rand/v2"
	"time"
)

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
	ms := 30000
	if n <= 15 { // 2^15 s is far past the cap; avoids shifting into overflow
		ms = min(1000<<(n-1), 30000)
	}
	return time.Duration(ms) * time.Millisecond
}

// outcome is how one attempt ended, and what it means for the delivery.
type outcome int

const (
	outcomeDelivered outcome = iota // 2xx
	outcomeRetry                    // transport error or 5xx with attempts left
	outcomeFailed                   // final failure
)

// classify applies the retry rules (docs/api.md, "Retries") to attempt n: status is the HTTP status (0 when none
// came back), transportErr tells a network failure that may be retried, final a refusal that must
// not be (a forbidden address, a URL that breaks the rules).
func classify(n, status int, transportErr, final bool) outcome {
	switch {
	case status >= 200 && status <= 299:
		return outcomeDelivered
	case final:
		return outcomeFailed
	case (transportErr || status >= 500 && status <= 599) && n < MaxAttempts:
		return outcomeRetry
	default:
		return outcomeFailed
	}
}
