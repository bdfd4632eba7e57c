package verdict

// Reason is a result's sub-status: the reason field (docs/api.md, "Reasons"). Every result has
// one; the step sets it on every path, and Apply falls back to the outcome's default.
type Reason string

// The reasons.
const (
	ReasonAccepted             Reason = "accepted"                // RCPT accepted, not catch-all
	ReasonMailboxUnknown       Reason = "mailbox_unknown"         // the reply says there is no such mailbox
	ReasonMailboxDisabled      Reason = "mailbox_disabled"        // the reply says the mailbox is disabled, suspended or inactive
	ReasonMailboxFull          Reason = "mailbox_full"            // over quota: 552, 4.2.2, 5.2.2 or its words
	ReasonCatchAll             Reason = "catch_all"               // any local part is accepted
	ReasonGreylisted           Reason = "greylisted"              // a 4xx that asks to retry later
	ReasonPolicyBlocked        Reason = "policy_blocked"          // a 5xx refusal of us, or one that says nothing readable
	ReasonSenderRejected       Reason = "sender_rejected"         // our MAIL FROM was refused, or our sender at RCPT
	ReasonTimeout              Reason = "timeout"                 // the probe budget ran out
	ReasonMailServerBusy       Reason = "mail_server_busy"        // the budget ran out while every session to the server was in use: not asked
	ReasonConnectionRefused    Reason = "connection_refused"      // no MX host accepted a connection
	ReasonTLSFailed            Reason = "tls_failed"              // STARTTLS failed
	ReasonMXPrivate            Reason = "mx_private"              // the MX addresses are private or loopback
	ReasonDNSError             Reason = "dns_error"               // SERVFAIL, REFUSED, DNS timeout
	ReasonNoMX                 Reason = "no_mx"                   // NXDOMAIN, or neither MX nor A/AAAA
	ReasonNullMX               Reason = "null_mx"                 // RFC 7505 null MX
	ReasonInvalidSyntax        Reason = "invalid_syntax"          // not an address
	ReasonDisposable           Reason = "disposable"              // a disposable domain
	ReasonProviderBlocksProbes Reason = "provider_blocks_probes"  // smtp_blocked provider, never probed
	ReasonTemporarilyUnavail   Reason = "temporarily_unavailable" // other 4xx, 421
	ReasonSMTPUTF8Unsupported  Reason = "smtputf8_unsupported"    // a UTF-8 local part, and the server offers no SMTPUTF8
	ReasonInternal             Reason = "internal"                // verification itself failed
	// ReasonSandboxUnlisted is only ever given to sandbox keys (docs/sandbox.md): a well-formed
	// address that is none of the magic addresses, which the sandbox does not verify.
	ReasonSandboxUnlisted Reason = "sandbox_unlisted"
)

// Reasons lists every reason, in the order of docs/api.md.
var Reasons = []Reason{
	ReasonAccepted, ReasonMailboxUnknown, ReasonMailboxDisabled, ReasonMailboxFull, ReasonCatchAll, ReasonGreylisted,
	ReasonPolicyBlocked, ReasonSenderRejected, ReasonTimeout, ReasonMailServerBusy, ReasonConnectionRefused,
	ReasonTLSFailed, ReasonMXPrivate, ReasonDNSError, ReasonNoMX, ReasonNullMX,
	ReasonInvalidSyntax, ReasonDisposable, ReasonProviderBlocksProbes, ReasonTemporarilyUnavail,
	ReasonSMTPUTF8Unsupported, ReasonInternal, ReasonSandboxUnlisted,
}

// checkReason is the reason of a failed check when its path set none.
func checkReason(c Check) Reason {
	switch c {
	case CheckSyntax:
		return ReasonInvalidSyntax
	case CheckDisposable:
		return ReasonDisposable
	case CheckNoMX:
		return ReasonNoMX
	case CheckSMTP:
		return ReasonMailboxUnknown
	}
	return ReasonInternal
}
