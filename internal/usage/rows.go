package usage

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/mailvet/mailvet/internal/verdict"
)

// Item names one email of a request in the usage log: its idempotency key, the account and key
// that sent it, and the route ("verify", "verify_batch", "verify_stream", "verify_async",
// "verify_list").
type Item struct {
	Key       string
	AccountID string
	KeyID     string // empty when not known
	Route     string
}

// Billable is the metering rule for a verified email: it is billable when it passed layer 1, the
// syntax check; every other outcome (disposable, no MX, SMTP, deliverable, …) counts once.
func Billable(r verdict.Result) bool {
	return r.FailedCheck == nil || *r.FailedCheck != verdict.CheckSyntax
}

// ResultRow is the usage-log row of a delivered result: billable by Billable, one quota unit, its
// verdict and a snapshot. snapshot is the JSON the client got; nil means r's.
func ResultRow(it Item, r verdict.Result, snapshot []byte) Row {
	if snapshot == nil {
		snapshot, _ = json.Marshal(r)
	}
	row := Row{
		ItemKey: it.Key, AccountID: it.AccountID, KeyID: it.KeyID, OccurredAt: time.Now(), Route: it.Route,
		EmailDomain: domainOf(r.Email), Status: string(r.Status), Billable: Billable(r), QuotaUnit: true,
		Snapshot: snapshot,
	}
	if r.FailedCheck != nil {
		row.FailedCheck = string(*r.FailedCheck)
	}
	return row
}

// FailedRow is the usage-log row of an email whose verification itself failed (errClass names
// the failure): the customer got no result, so it is neither billable nor a quota unit
// (docs/api.md, "Metering").
func FailedRow(it Item, r verdict.Result, snapshot []byte, errClass string) Row {
	row := ResultRow(it, r, snapshot)
	row.Billable, row.QuotaUnit, row.ErrorClass = false, false, errClass
	return row
}

// domainOf is the lower-cased part after the last @, or "" when there is none.
func domainOf(email string) string {
	if at := strings.LastIndexByte(email, '@'); at >= 0 {
		return strings.ToLower(email[at+1:])
	}
	return ""
}
