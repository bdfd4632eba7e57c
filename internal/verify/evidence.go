package verify

import (
	"strings"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/safetext"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// replyOf is the smtp_reply of a probe's reply; nil when the probe got none (Code 0).
func replyOf(rep smtp.Reply) *verdict.SMTPReply {
	if rep.Code == 0 {
		return nil
	}
	out := &verdict.SMTPReply{Code: rep.Code, Text: firstLine(rep)}
	if rep.Enhanced != "" {
		enh := rep.Enhanced
		out.EnhancedCode = &enh
	}
	return out
}

// firstLine is rep's first line of text, sanitised and bounded. The smtp package keeps a
// multi-line reply's lines joined by \n with each line's own enhanced code, and a one-line
// reply's text with its enhanced code already taken off.
func firstLine(rep smtp.Reply) string {
	line, _, multi := strings.Cut(rep.Text, "\n")
	if multi && rep.Enhanced != "" {
		line = strings.TrimPrefix(line, rep.Enhanced+" ")
	}
	return sanitizeReplyText(line)
}

// sanitizeReplyText makes a server's text safe to store, put in JSON and CSV, and show: invalid
// UTF-8 becomes U+FFFD, control and bidirectional-control characters go (safetext), the spaces
// around it are trimmed, and it is cut to verdict.MaxReplyText bytes on a character boundary.
func sanitizeReplyText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.TrimSpace(safetext.Strip(s))
	if len(s) <= verdict.MaxReplyText {
		return s
	}
	cut := verdict.MaxReplyText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut])
}
