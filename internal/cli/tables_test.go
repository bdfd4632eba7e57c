package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/client"
)

// A list stored before names were checked may hold a line break, an escape sequence or a
// right-to-left override: the table shows them as escapes, never as themselves.
func TestTablesShowNamesInertly(t *testing.T) {
	var out bytes.Buffer
	writeList(&out, client.List{ID: "l1", Name: "june\n\x1b[31mRED\u202egpj.exe\tx", State: "completed"})
	got := out.String()
	if strings.ContainsAny(got, "\x1b\u202e") || !strings.Contains(got, `june\u000a\u001b[31mRED\u202egpj.exe\u0009x`) {
		t.Fatalf("list table:\n%q", got)
	}
}

// The verify table shows each result's smtp_reply as the server wrote it, last, and nothing for
// a result no server was asked about; a control character in it is shown as an escape.
func TestVerifyTableShowsTheReply(t *testing.T) {
	var out bytes.Buffer
	writeResultTable(&out, []client.Result{
		{Email: "zoe@acme.example", Status: "undeliverable", Reason: "mailbox_unknown", Confidence: 0.02,
			SMTPReply: &client.SMTPReply{Code: 550, EnhancedCode: "5.1.1", Text: "No such user\there"}},
		{Email: "bob@old.example", Status: "unknown", Reason: "temporarily_unavailable", Confidence: 0.5,
			SMTPReply: &client.SMTPReply{Code: 421, Text: "Try later"}},
		{Email: "ann@mial.example", Status: "invalid", Reason: "no_mx", Suggestion: "mail.example"},
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "SMTP REPLY") ||
		!strings.HasSuffix(lines[1], `550 5.1.1 No such user\u0009here`) || !strings.HasSuffix(lines[2], "421 Try later") ||
		!strings.HasSuffix(strings.TrimRight(lines[3], " "), "mail.example") {
		t.Fatalf("verify table:\n%s", out.String())
	}
}
