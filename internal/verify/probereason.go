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

// replyReason classifies a refused or deferred RCPT.
func replyReason(v smtp.Verdict, rep smtp.Reply) verdict.Reason {
	enh := rep.Enhanced
	switch {
	case rep.Code == 552, enh == "4.2.2", enh == "5.2.2":
		return verdict.ReasonMailboxFull
	case smtp.SenderRefused(rep) && rep.Code/100 == 5:
		return verdict.ReasonSenderRejected
	case v == smtp.Undeliverable:
		return verdict.ReasonMailboxUnknown
	case rep.Code/100 == 5:
		// 5.7.x, 554, and every other permanent refusal that is not about the mailbox.
		return verdict.ReasonPolicyBlocked
	case rep.Code == 421:
		return verdict.ReasonTemporarilyUnavail
	case isGreylisting(rep):
		return verdict.ReasonGreylisted
	}
	return verdict.ReasonTemporarilyUnavail
}

// isGreylisting recognises a greylisting deferral: the text says so, or a 450/451 carries the
// 4.7.x (security/policy) enhanced code that greylisting daemons (postgrey, rspamd, Exchange)
// answer with.
func isGreylisting(rep smtp.Reply) bool {
	t := strings.ToLower(rep.Text)
	for _, w := range []string{"greylist", "graylist", "grey-list", "gray-list", "try again later", "retry later"} {
		if strings.Contains(t, w) {
			return true
		}
	}
	return (rep.Code == 450 || rep.Code == 451) && strings.HasPrefix(rep.Enhanced, "4.7.")
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
	case errors.Is(err, smtp.ErrTimeout):
		return verdict.ReasonTimeout
	case errors.Is(err, smtp.ErrClosed):
		return verdict.ReasonInternal
	case strings.Contains(msg, "MAIL FROM:"):
		return verdict.ReasonSenderRejected
	case strings.Contains(msg, "STARTTLS:"), strings.Contains(msg, "TLS handshake:"):
		return verdict.ReasonTLSFailed
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
