package verify

import (
	"errors"
	"strings"

	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// probeReason derives the reason from the SMTP probe's answer: its verdict, the RCPT reply
// (code and enhanced code) and, when there is no reply, the error. The smtp package keeps most
// errors as text (fmt.Errorf with %v), so the sender and TLS cases are recognised by the
// prefixes its session code writes ("MAIL FROM:", "STARTTLS:", "TLS handshake:").
func probeReason(pr smtp.Result) verdict.Reason {
	switch {
	case pr.Blocked:
		return verdict.ReasonProviderBlocksProbes
	case pr.Verdict == smtp.Deliverable:
		return verdict.ReasonAccepted
	case pr.Verdict == smtp.CatchAll:
		return verdict.ReasonCatchAll
	}
	if rep := pr.Reply; rep.Code != 0 && rep.Code/100 != 2 {
		return replyReason(pr.Verdict, rep)
	}
	if pr.Verdict == smtp.Undeliverable {
		return verdict.ReasonMailboxUnknown
	}
	return errReason(pr.Err)
}

// replyReason is the reason of a refused or deferred RCPT: the meaning the smtp package's
// classifier reads in the reply (docs/architecture.md, "Reading replies"), whose names are the
// reasons'. A reply that reads as "no such mailbox" on a result whose verdict is not
// undeliverable (a refusing banner, which answers no RCPT) is a refusal that says nothing about
// the mailbox: policy_blocked.
func replyReason(v smtp.Verdict, rep smtp.Reply) verdict.Reason {
	c := smtp.Classify(rep)
	switch {
	case v == smtp.Undeliverable && c.Verdict != smtp.Undeliverable:
		return verdict.ReasonMailboxUnknown
	case v != smtp.Undeliverable && c.Verdict == smtp.Undeliverable:
		if rep.Code/100 == 5 {
			return verdict.ReasonPolicyBlocked
		}
		return verdict.ReasonTemporarilyUnavail
	}
	return verdict.Reason(c.Meaning)
}

// errReason classifies a probe that ended without a reply to the address's RCPT.
func errReason(err error) verdict.Reason {
	if err == nil {
		return verdict.ReasonInternal // an unknown verdict with neither reply nor error: a bug
	}
	msg := err.Error()
	switch {
	case errors.Is(err, smtp.ErrForbiddenAddress):
		return verdict.ReasonMXPrivate
	case errors.Is(err, smtp.ErrBlocked):
		return verdict.ReasonProviderBlocksProbes
	case errors.Is(err, smtp.ErrSMTPUTF8Unsupported):
		return verdict.ReasonSMTPUTF8Unsupported
	case errors.Is(err, smtp.ErrBusy):
		// Before timeout, which it wraps: the budget ended, but no server was asked.
		return verdict.ReasonMailServerBusy
	case errors.Is(err, smtp.ErrTimeout):
		return verdict.ReasonTimeout
	case errors.Is(err, smtp.ErrClosed):
		return verdict.ReasonInternal
	case strings.Contains(msg, "MAIL FROM:"):
		return verdict.ReasonSenderRejected
	case strings.Contains(msg, "STARTTLS:"), strings.Contains(msg, "TLS handshake:"):
		return verdict.ReasonTLSFailed
	case errors.Is(err, smtp.ErrProtocol):
		// It took the connection and broke SMTP: it was reached, so not connection_refused.
		return verdict.ReasonTemporarilyUnavail
	case errors.Is(err, smtp.ErrNoHost):
		// Every MX address was tried and none gave a session: refused, unreachable, a banner
		// that was not 220, or a tarpit that let the connection time out.
		if strings.Contains(msg, "timeout") {
			return verdict.ReasonTimeout
		}
		return verdict.ReasonConnectionRefused
	case strings.Contains(msg, "timeout"):
		return verdict.ReasonTimeout
	}
	return verdict.ReasonTemporarilyUnavail
}
