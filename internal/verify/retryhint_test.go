package verify

import (
	"testing"
	"time"
)

func TestRetryHint(t *testing.T) {
	for text, want := range map[string]time.Duration{
		"Greylisted, please try again in 60 seconds":        60 * time.Second,
		"4.7.1 Greylisted: retry in 5 minutes":              5 * time.Minute,
		"Try again after 300s":                              300 * time.Second,
		"greylisted, come back in 1 min":                    time.Minute,
		"Greylisted, please try again later":                0,
		"Service unavailable, try again in 2 hours":         2 * time.Hour,
		"see https://example.com/greylist?retry=in 5 posts": 0,
	} {
		if got := RetryHint(text); got != want {
			t.Errorf("RetryHint(%q) = %v, want %v", text, got, want)
		}
	}
}
