package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// Lists uploaded at the same moment cannot both spend the room under the spend cap: each is
// admitted for its worst case (every address billable) against what the others already hold,
// whichever commits first. Rounds of two uploads of 6 addresses at once (the most an account may
// have in progress on one server) against room for 7 (5 included, 1 EUR each beyond, a 2 EUR
// cap): one is admitted, the other refused 402.
func TestConcurrentListUploadsKeepToTheSpendCap(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true, env: map[string]string{
		"MAILVET_PLAN_BUILDER_MONTHLY_CALLS": "5", "MAILVET_OVERAGE_EUR_BUILDER": "1"}})
	for round := range 10 {
		acct, key := b.customer(plan.Builder)
		_, err := b.pool.Exec(context.Background(), `UPDATE accounts SET hard_cap_eur = 2 WHERE id = $1`, acct)
		pgtest.Must(t, err, "cap")
		const n = 2
		codes := make(chan int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var s strings.Builder
				for j := range 6 {
					fmt.Fprintf(&s, "r%d-l%d-%d@acme.test\n", round, i, j)
				}
				codes <- b.upload(key, "text/plain", "", s.String()).status
			}()
		}
		wg.Wait()
		close(codes)
		got := map[int]int{}
		for c := range codes {
			got[c]++
		}
		admitted := b.count(`SELECT coalesce(sum(unique_addresses), 0) FROM lists WHERE account_id = $1`, acct)
		if got[http.StatusAccepted] != 1 || got[http.StatusPaymentRequired] != n-1 || admitted != 6 {
			t.Fatalf("round %d: two uploads of 6 against room for 7: %v, %d addresses admitted", round, got, admitted)
		}
	}
}
