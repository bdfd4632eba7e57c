// Package sandbox answers the verify requests of sandbox keys (sk_test_…): from a fixed table of
// magic addresses under the reserved domain Domain, one per status and reason the real engine can
// return, and every other address by its syntax alone (docs/sandbox.md). It does no DNS, no SMTP
// and no I/O of any kind, so an integrator can test every branch of their code deterministically
// and for free. The table here is the one docs/sandbox.md shows; TestTableDocumented keeps the two
// the same. It imports only internal/verdict: the syntax check comes from its caller (Syntax), so
// that the verification service can use it without depending on the engine
// (docs/architecture.md, "Dependencies").
package sandbox

import (
	"sort"
	"strings"

	"github.com/mailvet/mailvet/internal/verdict"
)

// Syntax is the engine's syntax check (layer 1, docs/architecture.md, "1. Syntax"): raw's
// normalised form and true when it is an address, false when it is not. It must do no I/O.
type Syntax func(raw string) (normalized string, ok bool)

// Domain is the domain of the magic addresses. .test is reserved (RFC 2606), so no real mailbox
// can ever be under it and a live key verifying one gets the engine's own answer (no_mx).
const Domain = "sandbox.mailvet.test"

// MXHost is the mx_host the magic addresses that reach a mail server report.
const MXHost = "mx." + Domain

// Magic is one magic address's answer.
type Magic struct {
	// Local is the local part: the address is Local@Domain. A "+tag" after it is ignored, so that
	// a list can hold many addresses with one answer.
	Local   string
	Outcome verdict.Outcome
	Reason  verdict.Reason
	Check   *verdict.Check // failed_check; nil for none
	// MX is whether the answer says the domain has a mail server (mx_found, mx_host).
	MX           bool
	Role         bool
	FreeProvider bool
	Disposable   bool
	SMTPBlocked  bool
	Suggestion   string // "" for none
	// Reply is the SMTP reply the answer says it was decided on; nil for none.
	Reply *verdict.SMTPReply
}

func check(c verdict.Check) *verdict.Check { return &c }

func reply(code int, enhanced, text string) *verdict.SMTPReply {
	r := &verdict.SMTPReply{Code: code, Text: text}
	if enhanced != "" {
		r.EnhancedCode = &enhanced
	}
	return r
}

// Table is every magic address, in the order of docs/sandbox.md: one per reason of
// verdict.Reasons that the engine returns for an address (internal is a failed job's only and
// sandbox_unlisted the sandbox's own), and the signals role, free provider and suggestion.
var Table = []Magic{
	{Local: "accepted", Outcome: verdict.OutcomeDeliverable, Reason: verdict.ReasonAccepted, MX: true, Reply: reply(250, "2.1.5", "OK")},
	{Local: "role", Outcome: verdict.OutcomeDeliverableRole, Reason: verdict.ReasonAccepted, MX: true, Role: true, Reply: reply(250, "2.1.5", "OK")},
	{Local: "free_provider", Outcome: verdict.OutcomeDeliverable, Reason: verdict.ReasonAccepted, MX: true, FreeProvider: true, Reply: reply(250, "2.1.5", "OK")},
	{Local: "mailbox_unknown", Outcome: verdict.OutcomeUndeliverable, Reason: verdict.ReasonMailboxUnknown, Check: check(verdict.CheckSMTP), MX: true, Reply: reply(550, "5.1.1", "No such user")},
	{Local: "mailbox_disabled", Outcome: verdict.OutcomeUndeliverable, Reason: verdict.ReasonMailboxDisabled, Check: check(verdict.CheckSMTP), MX: true, Reply: reply(550, "5.2.1", "Account disabled")},
	{Local: "mailbox_full", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonMailboxFull, MX: true, Reply: reply(452, "4.2.2", "Mailbox full")},
	{Local: "catch_all", Outcome: verdict.OutcomeCatchAll, Reason: verdict.ReasonCatchAll, MX: true, Reply: reply(250, "2.1.5", "OK")},
	{Local: "greylisted", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonGreylisted, MX: true, Reply: reply(450, "4.7.1", "Greylisted, try again later")},
	{Local: "policy_blocked", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonPolicyBlocked, MX: true, Reply: reply(554, "5.7.1", "Client host blocked")},
	{Local: "sender_rejected", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonSenderRejected, MX: true, Reply: reply(553, "5.1.8", "Sender address rejected")},
	{Local: "timeout", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonTimeout, MX: true},
	{Local: "mail_server_busy", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonMailServerBusy, MX: true},
	{Local: "connection_refused", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonConnectionRefused, MX: true},
	{Local: "tls_failed", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonTLSFailed, MX: true},
	{Local: "mx_private", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonMXPrivate, MX: true},
	{Local: "dns_error", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonDNSError},
	{Local: "no_mx", Outcome: verdict.OutcomeInvalid, Reason: verdict.ReasonNoMX, Check: check(verdict.CheckNoMX), Suggestion: "mailvet.test"},
	{Local: "null_mx", Outcome: verdict.OutcomeInvalid, Reason: verdict.ReasonNullMX, Check: check(verdict.CheckNoMX)},
	{Local: "invalid_syntax", Outcome: verdict.OutcomeInvalid, Reason: verdict.ReasonInvalidSyntax, Check: check(verdict.CheckSyntax)},
	{Local: "disposable", Outcome: verdict.OutcomeInvalid, Reason: verdict.ReasonDisposable, Check: check(verdict.CheckDisposable), Disposable: true},
	{Local: "provider_blocks_probes", Outcome: verdict.OutcomeSMTPBlocked, Reason: verdict.ReasonProviderBlocksProbes, MX: true, SMTPBlocked: true, FreeProvider: true},
	{Local: "temporarily_unavailable", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonTemporarilyUnavail, MX: true, Reply: reply(421, "4.3.2", "Service not available")},
	{Local: "smtputf8_unsupported", Outcome: verdict.OutcomeUnknown, Reason: verdict.ReasonSMTPUTF8Unsupported, MX: true},
}

var byLocal = func() map[string]Magic {
	m := make(map[string]Magic, len(Table))
	for _, x := range Table {
		m[x.Local] = x
	}
	return m
}()

// Address is the magic address of m.
func (m Magic) Address() string { return m.Local + "@" + Domain }

// Lookup finds the magic entry of an address: its domain is Domain (any case) and its local part,
// lowercased and without a "+tag", is one of the table's.
func Lookup(raw string) (Magic, bool) {
	s := strings.ToLower(strings.Trim(raw, " \t"))
	local, domain, ok := strings.Cut(s, "@")
	if !ok || domain != Domain {
		return Magic{}, false
	}
	local, _, _ = strings.Cut(local, "+")
	m, ok := byLocal[local]
	return m, ok
}

// Verify answers raw as a sandbox key gets it (docs/sandbox.md, "Magic addresses" and "Every
// other address"), with check deciding the syntax:
//   - a magic address: its entry of Table;
//   - an address that fails the syntax check: invalid, invalid_syntax, as live;
//   - any other address: unknown, sandbox_unlisted, with nothing else looked at.
//
// Every answer has Sandbox set. It never does I/O and is deterministic: the same input always
// gets the same answer (latency_ms aside, which the caller sets).
func Verify(raw string, check Syntax) verdict.Result {
	r := verdict.Result{Email: strings.Trim(raw, " \t"), Sandbox: true}
	if m, ok := Lookup(raw); ok {
		r.Email = strings.ToLower(r.Email)
		r.Reason, r.FailedCheck = m.Reason, m.Check
		r.Role, r.FreeProvider, r.Disposable, r.SMTPBlocked = m.Role, m.FreeProvider, m.Disposable, m.SMTPBlocked
		r.CatchAll = m.Outcome == verdict.OutcomeCatchAll
		if m.MX {
			host := MXHost
			r.MXFound, r.MXHost = true, &host
		}
		if m.Suggestion != "" {
			s := m.Suggestion
			r.Suggestion = &s
		}
		if m.Reply != nil {
			rep := *m.Reply
			r.SMTPReply = &rep
		}
		r.Apply(m.Outcome)
		return r
	}
	email, ok := check(raw)
	if !ok {
		r.Fail(verdict.CheckSyntax, verdict.OutcomeInvalid) // reason invalid_syntax
		return r
	}
	r.Email = email
	r.Reason = verdict.ReasonSandboxUnlisted
	r.Apply(verdict.OutcomeUnknown)
	return r
}

// Locals is the table's local parts, sorted: for error messages and docs checks.
func Locals() []string {
	out := make([]string, 0, len(Table))
	for _, m := range Table {
		out = append(out, m.Local)
	}
	sort.Strings(out)
	return out
}
