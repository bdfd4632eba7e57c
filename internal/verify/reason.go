package verify

import (
	"errors"
	"strings"

	"github.com/mailvet/mailvet/internal/verify/smtp"
)

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
)

// Reasons lists every reason, in the order of docs/api.md.
var Reasons = []Reason{
	ReasonAccepted, ReasonMailboxUnknown, ReasonMailboxDisabled, ReasonMailboxFull, ReasonCatchAll, ReasonGreylisted,
	ReasonPolicyBlocked, ReasonSenderRejected, ReasonTimeout, ReasonConnectionRefused,
	ReasonTLSFailed, ReasonMXPrivate, ReasonDNSError, ReasonNoMX, ReasonNullMX,
	ReasonInvalidSyntax, ReasonDisposable, ReasonProviderBlocksProbes, ReasonTemporarilyUnavail,
	ReasonSMTPUTF8Unsupported, ReasonInternal,
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

// probeReason derives the reason from the SMTP probe's answer: its verdict, the RCPT reply
// (code and enhanced code) and, when there is no reply, the error. The smtp package keeps most
// errors as text (fmt.Errorf with %v), so the sender and TLS cases are recognised by the
// prefixes its session code writes ("MAIL FROM:", "STARTTLS:", "TLS handshake:").
func probeReason(pr smtp.Result) Reason {
	switch {
	case pr.Blocked:
		return ReasonProviderBlocksProbes
	case pr.Verdict == smtp.Deliverable:
		return ReasonAccepted
	case pr.Verdict == smtp.CatchAll:
		return ReasonCatchAll
	}
	if rep := pr.Reply; rep.Code != 0 && rep.Code/100 != 2 {
		return replyReason(pr.Verdict, rep)
	}
	if pr.Verdict == smtp.Undeliverable {
		return ReasonMailboxUnknown
	}
	return errReason(pr.Err)
}

// replyReason is the reason of a refused or deferred RCPT: the meaning the smtp package's
// classifier reads in the reply (docs/architecture.md, "Reading replies"), whose names are the
// reasons'. A reply that reads as "no such mailbox" on a result whose verdict is not
// undeliverable (a refusing banner, which answers no RCPT) is a refusal that says nothing about
// the mailbox: policy_blocked.
func replyReason(v smtp.Verdict, rep smtp.Reply) Reason {
	c := smtp.Classify(rep)
	switch {
	case v == smtp.Undeliverable && c.Verdict != smtp.Undeliverable:
		return ReasonMailboxUnknown
	case v != smtp.Undeliverable && c.Verdict == smtp.Undeliverable:
		if rep.Code/100 == 5 {
			return ReasonPolicyBlocked
		}
		return ReasonTemporarilyUnavail
	}
	return Reason(c.Meaning)
}

// errReason classifies a probe that ended without a reply to the address's RCPT.
func errReason(err error) Reason {
	if err == nil {
		return ReasonInternal // an unknown verdict with neither reply nor error: a bug
	}
	msg := err.Error()
	switch {
	case errors.Is(err, smtp.ErrForbiddenAddress):
		return ReasonMXPrivate
	case errors.Is(err, smtp.ErrBlocked):
		return ReasonProviderBlocksProbes
	case errors.Is(err, smtp.ErrSMTPUTF8Unsupported):
		return ReasonSMTPUTF8Unsupported
	case errors.Is(err, smtp.ErrTimeout):
		return ReasonTimeout
	case errors.Is(err, smtp.ErrClosed):
		return ReasonInternal
	case strings.Contains(msg, "MAIL FROM:"):
		return ReasonSenderRejected
	case strings.Contains(msg, "STARTTLS:"), strings.Contains(msg, "TLS handshake:"):
		return ReasonTLSFailed
	case errors.Is(err, smtp.ErrNoHost):
		// Every MX address was tried and none gave a session: refused, unreachable, a banner
		// that was not 220, or a tarpit that let the connection time out.
		if strings.Contains(msg, "timeout") {
			return ReasonTimeout
		}
		return ReasonConnectionRefused
	case strings.Contains(msg, "timeout"):
		return ReasonTimeout
	}
	return ReasonTemporarilyUnavail
}
