package client

import (
	"encoding/json"
	"time"
)

// The types below mirror the schemas of /openapi.json (internal/api/openapi.json); docs/api.md
// explains every field. JSON nulls decode to the zero value (an empty string, a nil pointer for
// timestamps), and Result encodes its empty strings back to null, so a Result marshalled by the
// CLI reads like the API's own.

// Status values of Result.Status.
const (
	StatusDeliverable   = "deliverable"
	StatusUndeliverable = "undeliverable"
	StatusUnknown       = "unknown"
	StatusCatchAll      = "catch_all"
	StatusInvalid       = "invalid"
)

// Result is the verification result of one address (VerifyResult).
type Result struct {
	Email        string  `json:"email"`         // the address, normalised: trimmed of spaces and tabs, domain lowercased and in ASCII (xn--) form, a UTF-8 local part in NFC
	Valid        bool    `json:"valid"`         // the mailbox was confirmed (status deliverable)
	Status       string  `json:"status"`        // deliverable, undeliverable, unknown, catch_all, invalid
	Confidence   float64 `json:"confidence"`    // 0 to 1 (docs/api.md, the confidence table)
	FailedCheck  string  `json:"failed_check"`  // syntax, disposable, no_mx, smtp; "" when none failed
	Disposable   bool    `json:"disposable"`    //
	Role         bool    `json:"role"`          // a role local part (info@, sales@, …)
	FreeProvider bool    `json:"free_provider"` //
	CatchAll     bool    `json:"catch_all"`     //
	SMTPBlocked  bool    `json:"smtp_blocked"`  // the provider blocks probing: not probed
	MXFound      bool    `json:"mx_found"`      //
	MXHost       string  `json:"mx_host"`       // primary MX host; "" when none
	Suggestion   string  `json:"suggestion"`    // typo correction of the domain; "" when none
	LatencyMS    float64 `json:"latency_ms"`    //
	Reason       string  `json:"reason"`        // the sub-status (docs/api.md, "Reasons")
	// SMTPReply is the mail server's reply the verdict was decided on; nil when no server was
	// asked about the address or none answered (docs/api.md, "The verify result").
	SMTPReply *SMTPReply `json:"smtp_reply"`
	// Sandbox is true on every answer to a sandbox key (sk_test_…), which comes from the
	// sandbox's magic addresses, not from a verification (docs/sandbox.md).
	Sandbox bool `json:"sandbox,omitempty"`
	// Index is the position, from 0, in the emails given to VerifyStream or VerifyBatch of the
	// address this result answers; 0 for the one address of Verify and Job. A stream's results
	// come in completion order, and Email is the normalised address, the same for inputs that
	// differ only in the domain's case or in surrounding blanks and for an address given twice,
	// so Index is what matches a result to its input (docs/api.md, "Verify a stream"). It is the
	// client's count across all of a call's requests, not a field of the API's verify result, so
	// it is not read from nor written to JSON.
	Index int `json:"-"`
}

// SMTPReply is a mail server's reply as evidence of a verdict (SMTPReply).
type SMTPReply struct {
	Code         int    `json:"code"`          // the reply code, e.g. 550
	EnhancedCode string `json:"enhanced_code"` // e.g. "5.1.1"; "" when the reply had none
	Text         string `json:"text"`          // the first line of its text, sanitised, at most 200 bytes
}

// MarshalJSON writes null for an empty EnhancedCode, as the API does.
func (r SMTPReply) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Code         int     `json:"code"`
		EnhancedCode *string `json:"enhanced_code"`
		Text         string  `json:"text"`
	}{r.Code, nullable(r.EnhancedCode), r.Text})
}

// MarshalJSON writes the fields in the API's order, with null for the empty optional strings.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Email        string     `json:"email"`
		Valid        bool       `json:"valid"`
		Status       string     `json:"status"`
		Confidence   float64    `json:"confidence"`
		FailedCheck  *string    `json:"failed_check"`
		Disposable   bool       `json:"disposable"`
		Role         bool       `json:"role"`
		FreeProvider bool       `json:"free_provider"`
		CatchAll     bool       `json:"catch_all"`
		SMTPBlocked  bool       `json:"smtp_blocked"`
		MXFound      bool       `json:"mx_found"`
		MXHost       *string    `json:"mx_host"`
		Suggestion   *string    `json:"suggestion"`
		LatencyMS    float64    `json:"latency_ms"`
		Reason       string     `json:"reason"`
		SMTPReply    *SMTPReply `json:"smtp_reply"`
		Sandbox      bool       `json:"sandbox,omitempty"`
	}{r.Email, r.Valid, r.Status, r.Confidence, nullable(r.FailedCheck), r.Disposable, r.Role, r.FreeProvider,
		r.CatchAll, r.SMTPBlocked, r.MXFound, nullable(r.MXHost), nullable(r.Suggestion), r.LatencyMS, r.Reason, r.SMTPReply, r.Sandbox})
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// JobResult is the body POSTed to a webhook (and Job.Result): a Result plus the job's id, and
// Error ("internal") when verification itself failed.
type JobResult struct {
	Result
	JobID string `json:"job_id"`
	Error string `json:"error,omitempty"`
}

// MarshalJSON keeps Result's nulls and adds the job fields.
func (r JobResult) MarshalJSON() ([]byte, error) {
	inner, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(inner, &m); err != nil {
		return nil, err
	}
	m["job_id"], _ = json.Marshal(r.JobID)
	if r.Error != "" {
		m["error"], _ = json.Marshal(r.Error)
	}
	return json.Marshal(m)
}

// AsyncOptions are the callback settings of VerifyAsync.
type AsyncOptions struct {
	// WebhookURL receives the signed result: https, a public host name (docs/api.md, "URL rules").
	WebhookURL string
	// WebhookSecret (8 to 256 characters) keys the X-Service-Signature and Standard Webhooks
	// signatures; verify a callback with VerifyWebhook. Empty: the callback is not signed.
	WebhookSecret string
}

// Accepted is the answer to VerifyAsync: the job is queued.
type Accepted struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"` // "pending"
}

// Job states.
const (
	JobPending    = "pending"
	JobProcessing = "processing"
	JobRetrying   = "retrying"
	JobCompleted  = "completed"
	JobFailed     = "failed"
)

// Job is an asynchronous verification (GET /v1/email/jobs/{job_id}).
type Job struct {
	JobID         string     `json:"job_id"`
	Status        string     `json:"status"` // pending, processing, retrying, completed, failed
	Email         *string    `json:"email"`  // nil once the job expired
	Result        *JobResult `json:"result"` // nil until completed or failed, and once expired
	CreatedAt     time.Time  `json:"created_at"`
	CompletedAt   *time.Time `json:"completed_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"` // when a retrying job is probed again
	// ExpiredAt is when retention (or DeleteHistory) removed the finished job's email and result;
	// nil while they are kept (docs/personal-data.md, "Retention").
	ExpiredAt *time.Time `json:"expired_at"`
}

// Done reports whether the job has reached a final state.
func (j Job) Done() bool { return j.Status == JobCompleted || j.Status == JobFailed }

// Limits are a plan's limits.
type Limits struct {
	MonthlyCalls    int `json:"monthly_calls"`
	RateLimitPerMin int `json:"rate_limit_per_min"`
	MaxKeys         int `json:"max_keys"`
}

// Account is the caller's account (GET /v1/management/account).
type Account struct {
	AccountID          string     `json:"account_id"`
	Tier               string     `json:"tier"` // free, builder, scale
	SubscriptionStatus string     `json:"subscription_status"`
	CurrentPeriodEnd   *time.Time `json:"current_period_end"`
	CancelAtPeriodEnd  bool       `json:"cancel_at_period_end"`
	CanceledAt         *time.Time `json:"canceled_at"`
	CancelAt           *time.Time `json:"cancel_at"`
	TrialStart         *time.Time `json:"trial_start"`
	TrialEnd           *time.Time `json:"trial_end"`
	BillingCycleAnchor *time.Time `json:"billing_cycle_anchor"`
	Limits             Limits     `json:"limits"`
	// UsageThisMonth is UsageSummary.CallsUsed: free, quota units used; paid, billable verifications.
	UsageThisMonth int `json:"usage_this_month"`
}

// Key is a standard key as listed: never the key itself, only its masked Prefix.
type Key struct {
	ID        string    `json:"id"`
	Label     string    `json:"label"`
	Prefix    string    `json:"prefix"`
	Mode      string    `json:"mode"` // ModeLive or ModeSandbox
	CreatedAt time.Time `json:"created_at"`
}

// Key modes (docs/sandbox.md): a live key (sk_live_…) verifies for real and is billed; a sandbox
// key (sk_test_…) is answered from the documented magic addresses, never probes and is never
// billed.
const (
	ModeLive    = "live"
	ModeSandbox = "sandbox"
)

// CreatedKey is a new standard key: Key holds the full key, returned this once.
type CreatedKey struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Label     string    `json:"label"`
	Prefix    string    `json:"prefix"`
	Mode      string    `json:"mode"` // ModeLive or ModeSandbox
	CreatedAt time.Time `json:"created_at"`
	Warning   string    `json:"warning"`
}

// KeyList is the account's active standard keys and its plan's maximum.
type KeyList struct {
	Keys  []Key `json:"keys"`
	Count int   `json:"count"`
	Max   int   `json:"max"`
}

// DailyUsage is billable verifications per UTC day for the last 30 days, oldest first.
type DailyUsage struct {
	Days []DayUsage `json:"days"`
}

// DayUsage is one UTC day of DailyUsage.
type DayUsage struct {
	Date  string `json:"date"` // YYYY-MM-DD
	Calls int    `json:"calls"`
}

// UsageSummary is the current month's usage (GET /v1/management/usage/summary).
type UsageSummary struct {
	Period struct {
		Start time.Time `json:"start"`
		End   time.Time `json:"end"` // exclusive
	} `json:"period"`
	CallsUsed        int     `json:"calls_used"`
	CallsIncluded    int     `json:"calls_included"`
	CallsRemaining   int     `json:"calls_remaining"`
	OverageCalls     int     `json:"overage_calls"`
	EstimatedCostEUR float64 `json:"estimated_cost_eur"`
	Tier             string  `json:"tier"`
}

// DeliveryAttempt is one attempt of a webhook delivery.
type DeliveryAttempt struct {
	Attempt      int       `json:"attempt"`
	StartedAt    time.Time `json:"started_at"`
	DurationMS   int       `json:"duration_ms"`
	HTTPStatus   *int      `json:"http_status"` // nil when no response arrived
	Error        *string   `json:"error"`
	ResponseBody *string   `json:"response_body"`
}

// Delivery is one webhook delivery with its attempts.
type Delivery struct {
	ID         string            `json:"id"`
	JobID      *string           `json:"job_id"`  // the job whose result it carries; nil for a list's callback
	ListID     *string           `json:"list_id"` // the bulk list whose completion it announces; nil for a job's
	URL        string            `json:"url"`
	State      string            `json:"state"` // pending, retrying, delivered, failed
	Signed     bool              `json:"signed"`
	Attempts   int               `json:"attempts"`
	LastStatus *int              `json:"last_status"`
	LastError  *string           `json:"last_error"`
	ReplayOf   *string           `json:"replay_of"`
	CreatedAt  time.Time         `json:"created_at"`
	FinishedAt *time.Time        `json:"finished_at"`
	AttemptLog []DeliveryAttempt `json:"attempt_log"`
}

// DeliveryPage is one page of the delivery log, newest first.
type DeliveryPage struct {
	Deliveries []Delivery `json:"deliveries"`
	NextCursor string     `json:"next_cursor,omitempty"` // "" on the last page
}

// DeliveryQuery filters and pages Deliveries; the zero value is the first page of 20.
type DeliveryQuery struct {
	Status string // pending, retrying, delivered, failed; "" for all
	Limit  int    // 1 to 100; 0 for the API's default (20)
	Cursor string // DeliveryPage.NextCursor of the previous page
}

// AuditEvent is one security event of the account (docs/security.md, "Audit log").
type AuditEvent struct {
	ID        string    `json:"id"`
	At        time.Time `json:"at"`
	Kind      string    `json:"kind"`       // signin, signin_throttled, signup, signout, password_change, key_created, …
	Outcome   string    `json:"outcome"`    // success or failure
	ActorType string    `json:"actor_type"` // dashboard_user, api_key or system
	Actor     string    `json:"actor"`      // an email, a key's display form (never a key), or a system's name
	ClientIP  *string   `json:"client_ip"`  // nil when unknown
	Detail    string    `json:"detail"`
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Events     []AuditEvent `json:"events"`
	NextCursor string       `json:"next_cursor,omitempty"` // "" on the last page
}

// AuditQuery pages AuditEvents; the zero value is the first page of 50.
type AuditQuery struct {
	Limit  int    // 1 to 200; 0 for the API's default (50)
	Cursor string // AuditPage.NextCursor of the previous page
}

// Replay is the answer to RetryDelivery: the new delivery, queued.
type Replay struct {
	DeliveryID string `json:"delivery_id"`
	ReplayOf   string `json:"replay_of"`
	Status     string `json:"status"` // pending for a new replay; a repeated request gets the existing replay's state
}

// States of List.State (docs/lists.md, "States").
const (
	ListQueued    = "queued"
	ListRunning   = "running"
	ListCompleted = "completed"
	ListCanceled  = "canceled"
	ListFailed    = "failed"
)

// Formats of an uploaded list (ListUpload.Format, List.Format) and of its results
// (ResultsOptions.Format; csv and ndjson only).
const (
	ListCSV    = "csv"    // text/csv: a header row, then one row per address
	ListNDJSON = "ndjson" // application/x-ndjson: one object with a string "email" a line
	ListText   = "text"   // text/plain: one address a line
)

// List is a bulk list (GET /v1/email/lists/{id}): how its file was read, its state, counts and
// progress (docs/lists.md, "Progress").
type List struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	State         string     `json:"state"`  // queued, running, completed, canceled, failed
	Format        string     `json:"format"` // csv, ndjson, text
	Columns       []string   `json:"columns"`
	EmailColumn   string     `json:"email_column"`
	Rows          int        `json:"rows"`            // the file's data rows
	Unique        int        `json:"unique"`          // its distinct addresses: what is verified and billed
	Verified      int        `json:"verified"`        // unique addresses verified so far
	Progress      float64    `json:"progress"`        // Verified / Unique, 0 to 1
	RatePerSecond *float64   `json:"rate_per_second"` // nil before the list starts
	ETASeconds    *int       `json:"eta_seconds"`     // nil unless the list runs
	Counts        ListCounts `json:"counts"`
	WebhookURL    string     `json:"webhook_url"`
	Error         string     `json:"error"` // why a failed list failed
	CreatedAt     time.Time  `json:"created_at"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	ExpiresAt     *time.Time `json:"expires_at"` // when a finished list's rows and results are deleted
	ResultsURL    string     `json:"results_url"`
	// Sandbox is true for a list uploaded with a sandbox key (docs/sandbox.md).
	Sandbox bool `json:"sandbox,omitempty"`
}

// MarshalJSON writes the API's null for an empty WebhookURL or Error, so that a List written back
// out (`mailvet lists --json`) is what the API sent.
func (l List) MarshalJSON() ([]byte, error) {
	type fields List // without this method
	return json.Marshal(struct {
		fields
		WebhookURL *string `json:"webhook_url"`
		Error      *string `json:"error"`
	}{fields(l), nullable(l.WebhookURL), nullable(l.Error)})
}

// Done reports whether the list has reached a final state: completed, canceled or failed.
func (l List) Done() bool {
	return l.State == ListCompleted || l.State == ListCanceled || l.State == ListFailed
}

// ListCounts are a list's verified unique addresses by result status and by reason.
type ListCounts struct {
	ByStatus map[string]int `json:"by_status"`
	ByReason map[string]int `json:"by_reason"`
}

// ListPage is one page of the account's lists, newest first.
type ListPage struct {
	Lists      []List `json:"lists"`
	NextCursor string `json:"next_cursor"` // "" on the last page
}

// MarshalJSON writes the API's null for the last page's NextCursor.
func (p ListPage) MarshalJSON() ([]byte, error) {
	type fields ListPage // without this method
	return json.Marshal(struct {
		fields
		NextCursor *string `json:"next_cursor"`
	}{fields(p), nullable(p.NextCursor)})
}

// ListsPage pages Lists; the zero value is the first page of 20.
type ListsPage struct {
	Limit  int    // 1 to 100; 0 for the API's default (20)
	Cursor string // ListPage.NextCursor of the previous page
}

// ListUpload says how to read an uploaded file and what to do when its list is done.
type ListUpload struct {
	Format        string // ListCSV (the default when ""), ListNDJSON or ListText
	Column        string // CSV: the email column's name; "" lets the API pick it
	Name          string // your name for the list: up to 200 characters, no control or bidirectional control characters
	WebhookURL    string // called when the list completes or fails (docs/lists.md, "The completion callback")
	WebhookSecret string // signs the callback; sent as the Mailvet-Webhook-Secret header
}

// ResultsOptions chooses the format of a list's results and filters them.
type ResultsOptions struct {
	Format   string   // ListCSV (the default when "") or ListNDJSON
	Statuses []string // only rows verified with one of these statuses; nil for every row
	// RawFormulas asks for CSV cells exactly as stored (escape_formulas=false), for a program
	// that reads the file. By default the API puts an apostrophe before cells a spreadsheet
	// would run as formulas (docs/lists.md, "Formula cells"), and begins the file with UTF-8's
	// byte-order mark, which Excel needs to read it as UTF-8 (a program that reads such a
	// download skips its first 3 bytes, EF BB BF); the client leaves that default.
	RawFormulas bool
}

// HistoryDeleted is what DeleteHistory removed of one address (DELETE /v1/email/history).
type HistoryDeleted struct {
	Email   string `json:"email"` // the address as compared: trimmed, lower-cased
	Deleted struct {
		Results    int `json:"results"`    // result snapshots in the usage log
		Jobs       int `json:"jobs"`       // finished jobs whose email and result were removed
		Deliveries int `json:"deliveries"` // finished callbacks holding the address's result, expired jobs' included
		ListRows   int `json:"list_rows"`  // rows of finished lists
	} `json:"deleted"`
}
