package verify

import (
	"strings"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/safetext"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// SMTPReply is the mail server's reply a verdict was decided on: the result's smtp_reply field
// (docs/api.md, "The verify result"). It is evidence a customer can show when a verdict is
// disputed, so it is the server's own words, only made safe to store and show.
type SMTPReply struct {
	Code int `json:"code"`
	// EnhancedCode is the RFC 3463 status code the reply began with, like "5.1.1"; nil when it
	// had none.
	EnhancedCode *string `json:"enhanced_code"`
	// Text is the reply's first line after the codes: valid UTF-8 without control or
	// bidirectional-control characters, at most MaxReplyText bytes.
	Text string `json:"text"`
}

// MaxReplyText bounds smtp_reply.text in bytes. Real servers' first lines are shorter; a longer
// one is cut on a character boundary.
const MaxReplyText = 200

// replyOf is the smtp_reply of a probe's reply; nil when the probe got none (Code 0).
func replyOf(rep smtp.Reply) *SMTPReply {
	if rep.Code == 0 {
		return nil
	}
	out := &SMTPReply{Code: rep.Code, Text: firstLine(rep)}
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
// around it are trimmed, and it is cut to MaxReplyText bytes on a character boundary.
func sanitizeReplyText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.TrimSpace(safetext.Strip(s))
	if len(s) <= MaxReplyText {
		return s
	}
	cut := MaxReplyText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut])
}
