package api

import "github.com/mailvet/mailvet/internal/usage/usagetest"

// usage is the account's metering counts once the usage rows written behind the responses (of
// results and of refusals) have landed.
func (b *verifyBundle) usage(acct string) usagetest.Counts {
	b.t.Helper()
	b.settle()
	return usagetest.Of(b.t, b.pool, acct)
}

// charged is what the account was charged: free-tier units and billable results.
func (b *verifyBundle) charged(acct string) int {
	b.t.Helper()
	c := b.usage(acct)
	return c.Quota + c.Billable
}

// rows is how many of the account's usage rows pass keep, once written.
func (b *verifyBundle) rows(acct string, keep func(usagetest.Row) bool) int {
	b.t.Helper()
	b.settle()
	return usagetest.Count(usagetest.Rows(b.t, b.pool, acct), keep)
}

// settle waits for what the server writes behind its responses: rejection rows, and the rows and
// hold releases of requests.
func (b *verifyBundle) settle() {
	b.t.Helper()
	b.srv.rejections.Flush()
	usagetest.Settle(b.t, b.pool)
}
