package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/client"
)

// On a terminal, `verify ADDRESS…` shows how far it is, when a rate-limit wait ends, and once,
// with a long wait, that a file goes faster as a bulk list.
func TestBatchProgressLine(t *testing.T) {
	var out strings.Builder
	e := env{stderr: &out}
	e.batchProgress(client.BatchProgress{Done: 50, Total: 120})
	until := time.Date(2026, 11, 29, 2, 41, 10, 0, time.Local)
	e.batchProgress(client.BatchProgress{Done: 50, Total: 120, WaitingUntil: until, RateLimit: 10,
		Hint: "mailvet: VerifyBatch: 70 addresses are left at the plan's rate limit of 10 a minute: about 7 minutes; for large inputs upload a bulk list instead"})
	got := out.String()
	for _, want := range []string{"\r\033[Kverified 50 of 120", "verified 50 of 120; rate limit: waiting until 02:41:10",
		"VerifyBatch: 70 addresses are left", "mailvet verify --file LIST is a bulk list"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress %q lacks %q", got, want)
		}
	}
}
