package smtp

import (
	"errors"
	"unicode/utf8"
)

// ErrSMTPUTF8Unsupported explains an Unknown verdict for an address with a UTF-8 local part at a
// mail server that does not offer SMTPUTF8 (RFC 6531): the mailbox cannot be named to it, so it
// was not asked (reason smtputf8_unsupported, docs/api.md).
var ErrSMTPUTF8Unsupported = errors.New("smtp: the server does not offer SMTPUTF8, which the address's UTF-8 local part needs")

// needsSMTPUTF8 reports whether addr has a non-ASCII character. Layer 1 has already made the
// domain ASCII (A-labels), so that is a UTF-8 local part, which is sent as UTF-8 and only in a
// transaction that declared SMTPUTF8.
func needsSMTPUTF8(addr string) bool {
	for i := 0; i < len(addr); i++ {
		if addr[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// mailFrom is the MAIL FROM command of a new transaction, declaring SMTPUTF8 when a recipient
// of it needs that.
func (s *session) mailFrom(utf8 bool) string {
	if utf8 {
		return "MAIL FROM:<" + s.pl.p.cfg.MailFrom + "> SMTPUTF8"
	}
	return "MAIL FROM:<" + s.pl.p.cfg.MailFrom + ">"
}

// screenUTF8 settles the addresses of batch that this server cannot be asked about — a UTF-8
// local part where EHLO did not offer SMTPUTF8 — as unknown, and returns the others, and whether
// one of them needs a transaction that declared SMTPUTF8. A batch of ASCII addresses is returned
// as it is.
func (s *session) screenUTF8(batch []rcpt) ([]rcpt, bool) {
	need, refused := false, false
	for _, it := range batch {
		if it.j != nil && needsSMTPUTF8(it.j.addr) {
			need = true
			refused = refused || !s.smtputf8
		}
	}
	if !refused {
		return batch, need
	}
	kept := make([]rcpt, 0, len(batch))
	for _, it := range batch {
		if it.j != nil && needsSMTPUTF8(it.j.addr) {
			it.j.finish(Result{Verdict: Unknown, Host: it.j.host(), Err: ErrSMTPUTF8Unsupported})
			continue
		}
		kept = append(kept, it)
	}
	return kept, false
}
