// Package verdict is the verify result clients get (docs/api.md) and the vocabulary it is made
// of: statuses, failed checks, reasons and the confidence table. It imports nothing of the
// project, so that metering, queues and lists can name a result without depending on the
// verification engine (internal/verify) that produces it.
package verdict

import "time"

// Status is the verdict a result reports in its status field.
type Status string

// The statuses a result can have.
const (
	StatusDeliverable   Status = "deliverable"
	StatusUndeliverable Status = "undeliverable"
	StatusUnknown       Status = "unknown"
	StatusCatchAll      Status = "catch_all"
	StatusInvalid       Status = "invalid"
)

// Check names the check that failed an address: the result's failed_check.
type Check string

// The failed_check values.
const (
	CheckSyntax     Check = "syntax"
	CheckDisposable Check = "disposable"
	CheckNoMX       Check = "no_mx"
	CheckSMTP       Check = "smtp"
)

// Result is the verify result, exactly as it is serialised to clients and in webhook bodies
// (docs/api.md). Nullable fields are pointers so that they serialise as null, never as "".
type Result struct {
	Email        string  `json:"email"`
	Valid        bool    `json:"valid"`
	Status       Status  `json:"status"`
	Confidence   float64 `json:"confidence"`
	FailedCheck  *Check  `json:"failed_check"`
	Disposable   bool    `json:"disposable"`
	Role         bool    `json:"role"`
	FreeProvider bool    `json:"free_provider"`
	CatchAll     bool    `json:"catch_all"`
	SMTPBlocked  bool    `json:"smtp_blocked"`
	MXFound      bool    `json:"mx_found"`
	MXHost       *string `json:"mx_host"`
	Suggestion   *string `json:"suggestion"`
	LatencyMS    float64 `json:"latency_ms"`
	// Reason is the sub-status: why the result is what it is (reason.go). Never empty.
	Reason Reason `json:"reason"`
	// SMTPReply is the mail server's reply the verdict was decided on (reply.go); nil when no
	// server answered the probe or none ran.
	SMTPReply *SMTPReply `json:"smtp_reply"`
	// RetryAfter is the delay a greylisting reply's text asked for (RetryHint), 0 when it named
	// none. Never serialised: the async job runner uses it to schedule its re-probe.
	RetryAfter time.Duration `json:"-"`
	// Sandbox is true on every answer given to a sandbox key (docs/sandbox.md), which comes from
	// the sandbox's table and not from the engine; live answers leave it out.
	Sandbox bool `json:"sandbox,omitempty"`
}

// Outcome is a row of the confidence table (verdicts).
type Outcome int

// The outcomes of the confidence table.
const (
	OutcomeDeliverable     Outcome = iota // RCPT 250/251, not catch-all
	OutcomeDeliverableRole                // the same, for a role address
	OutcomeCatchAll                       // the server accepts any local part
	OutcomeSMTPBlocked                    // a provider that blocks probing; never probed
	OutcomeUnknown                        // timeout, greylisting, policy block, DNS failure
	OutcomeUndeliverable                  // RCPT 550/551/553 or enhanced 5.1.x
	OutcomeInvalid                        // syntax, disposable or no MX
)

// verdicts is the confidence table: the one place that maps an outcome to status, valid and
// confidence, so that every path through the pipeline reports the same numbers for an outcome.
// reason is the outcome's default reason, for a result whose path set none: the step always sets
// one, so only results built outside it (a failed job's, Local's pending one) use these.
var verdicts = map[Outcome]struct {
	status     Status
	valid      bool
	confidence float64
	reason     Reason
}{
	OutcomeDeliverable:     {StatusDeliverable, true, 0.95, ReasonAccepted},
	OutcomeDeliverableRole: {StatusDeliverable, true, 0.90, ReasonAccepted},
	OutcomeCatchAll:        {StatusCatchAll, false, 0.60, ReasonCatchAll},
	OutcomeSMTPBlocked:     {StatusUnknown, false, 0.75, ReasonProviderBlocksProbes},
	OutcomeUnknown:         {StatusUnknown, false, 0.50, ReasonInternal},
	OutcomeUndeliverable:   {StatusUndeliverable, false, 0.02, ReasonMailboxUnknown},
	OutcomeInvalid:         {StatusInvalid, false, 0.00, ReasonInvalidSyntax},
}

// Apply sets r's status, valid and confidence from the confidence table, and its reason to the
// outcome's default when no layer has set one, so that a result never goes out without a reason.
func (r *Result) Apply(o Outcome) {
	v := verdicts[o]
	r.Status, r.Valid, r.Confidence = v.status, v.valid, v.confidence
	if r.Reason == "" {
		r.Reason = v.reason
	}
}

// Fail marks r as failed at check c with outcome o.
func (r *Result) Fail(c Check, o Outcome) {
	r.FailedCheck = &c
	if r.Reason == "" {
		r.Reason = checkReason(c)
	}
	r.Apply(o)
}
