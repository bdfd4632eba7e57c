package verify

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// retryHint matches the delay a deferral's text asks for: "try again in 60 seconds", "retry in
// 5 minutes", "please retry after 300s", "come back in 1 min".
var retryHint = regexp.MustCompile(`(?i)(?:again|retry|back)\s+(?:in|after)\s+(\d{1,6})\s*(s|secs?|seconds?|m|mins?|minutes?|h|hours?)\b`)

// RetryHint returns the delay a greylisting reply's text suggests, or 0 when it names none.
func RetryHint(text string) time.Duration {
	m := retryHint.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0
	}
	unit := time.Second
	switch strings.ToLower(m[2])[0] {
	case 'm':
		unit = time.Minute
	case 'h':
		unit = time.Hour
	}
	return time.Duration(n) * unit
}
