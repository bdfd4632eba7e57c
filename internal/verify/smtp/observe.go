package smtp

import "strings"

// Observer is told about the prober's SMTP traffic. The verifier worker passes one that counts
// replies for its metrics (internal/opsmetrics; docs/operations.md, "Health, readiness and
// metrics"); this package defines only what it calls, so it needs no metrics library.
//
// Reply is called once per reply read, from the session's goroutine, so it must be cheap and
// safe for concurrent use. command is the command the reply answers, reduced to a fixed set:
// CONNECT (the banner), EHLO, HELO, STARTTLS, MAIL, RCPT, RSET, QUIT, or OTHER; code is the
// three-digit reply code (200–599). Neither ever carries an address or a host name.
type Observer interface {
	Reply(command string, code int)
}

// observe reports a reply to the configured observer, if any. cmd is the command line as sent,
// or a verb of its own (CONNECT).
func (p *Prober) observe(cmd string, code int) {
	if p.cfg.Observer != nil {
		p.cfg.Observer.Reply(commandVerb(cmd), code)
	}
}

// commandVerb is the verb of a command line, as one of Observer's fixed set.
func commandVerb(cmd string) string {
	verb, _, _ := strings.Cut(cmd, " ")
	verb = strings.ToUpper(verb)
	switch verb {
	case "CONNECT", "EHLO", "HELO", "STARTTLS", "MAIL", "RCPT", "RSET", "QUIT":
		return verb
	}
	return "OTHER"
}
