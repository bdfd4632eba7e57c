// Package verify is the verification pipeline: it turns an address into the verify result of
// spec §2.1 by running the five layers of spec §1 in order — syntax, disposable, MX, SMTP probe,
// signals — with the decisions of DESIGN.md §2. The API runs the local layers (Local); the
// verifier workers run the whole pipeline.
package verify

// Status is the verification outcome of spec §3.1.
type Status string

// The statuses of spec §2.1.
const (
	StatusDeliverable   Status = "deliverable"
	StatusUndeliverable Status = "undeliverable"
	StatusUnknown       Status = "unknown"
	StatusCatchAll      Status = "catch_all"
	StatusInvalid       Status = "invalid"
)

// Check names the layer that failed (spec §2.1 failed_check).
type Check string

// The failed_check values of spec §2.1.
const (
	CheckSyntax     Check = "syntax"
	CheckDisposable Check = "disposable"
	CheckNoMX       Check = "no_mx"
	CheckSMTP       Check = "smtp"
)

// Result is the verify result of spec §2.1, exactly as it is serialised to clients and in
// webhook bodies. Nullable fields are pointers so that they serialise as null, never as "".
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
}

// Outcome is a row of the confidence table of DESIGN.md §2.
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

// verdicts is the one table of DESIGN.md §2 that maps an outcome to status, valid, confidence.
var verdicts = map[Outcome]struct {
	status     Status
	valid      bool
	confidence float64
}{
	OutcomeDeliverable:     {StatusDeliverable, true, 0.95},
	OutcomeDeliverableRole: {StatusDeliverable, true, 0.90},
	OutcomeCatchAll:        {StatusCatchAll, false, 0.60},
	OutcomeSMTPBlocked:     {StatusUnknown, false, 0.75},
	OutcomeUnknown:         {StatusUnknown, false, 0.50},
	OutcomeUndeliverable:   {StatusUndeliverable, false, 0.02},
	OutcomeInvalid:         {StatusInvalid, false, 0.00},
}

// Apply sets r's status, valid and confidence from the confidence table.
func (r *Result) Apply(o Outcome) {
	v := verdicts[o]
	r.Status, r.Valid, r.Confidence = v.status, v.valid, v.confidence
}

// Fail marks r as failed at check c with outcome o.
func (r *Result) Fail(c Check, o Outcome) {
	r.FailedCheck = &c
	r.Apply(o)
}
