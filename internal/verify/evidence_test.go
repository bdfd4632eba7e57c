package verify

import (
	"context"
	"github.com/mailvet/mailvet/internal/verdict"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// replyOf keeps a reply's code, its enhanced code and the first line of its text, made safe to
// store and show, and is nil for no reply.
func TestReplyOf(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 150) // 300 bytes
	cases := []struct {
		name     string
		in       smtp.Reply
		code     int
		enhanced string // "" for null
		text     string
	}{
		{"one line", smtp.Reply{Code: 550, Enhanced: "5.1.1", Text: "<bob@acme.test>: Recipient address rejected: User unknown"},
			550, "5.1.1", "<bob@acme.test>: Recipient address rejected: User unknown"},
		{"no enhanced code", smtp.Reply{Code: 511, Text: "sorry, no mailbox here by that name (#5.1.1)"},
			511, "", "sorry, no mailbox here by that name (#5.1.1)"},
		// The smtp package joins a multi-line reply's lines, each with its own enhanced code.
		{"multi-line", smtp.Reply{Code: 550, Enhanced: "5.1.1", Text: "5.1.1 The email account that you tried to reach does not exist. Please try\n" +
			"5.1.1 double-checking the recipient's email address for typos or"},
			550, "5.1.1", "The email account that you tried to reach does not exist. Please try"},
		{"control and bidi characters", smtp.Reply{Code: 554, Enhanced: "5.7.1", Text: "blocked\x1b[31m \u202eusing zen\x00"},
			554, "5.7.1", "blocked[31m using zen"},
		{"invalid UTF-8", smtp.Reply{Code: 550, Text: "bad \xff\xfe byte"}, 550, "", "bad \uFFFD byte"},
		{"empty text", smtp.Reply{Code: 250}, 250, "", ""},
		{"long text cut between characters", smtp.Reply{Code: 550, Enhanced: "5.1.1", Text: "x" + long},
			550, "5.1.1", "x" + strings.Repeat("é", 99)},
	}
	for _, c := range cases {
		got := replyOf(c.in)
		if got == nil {
			t.Fatalf("%s: nil", c.name)
		}
		enh := ""
		if got.EnhancedCode != nil {
			enh = *got.EnhancedCode
			if enh == "" {
				t.Errorf("%s: enhanced_code is an empty string, want null", c.name)
			}
		}
		if got.Code != c.code || enh != c.enhanced || got.Text != c.text {
			t.Errorf("%s: %d %q %q, want %d %q %q", c.name, got.Code, enh, got.Text, c.code, c.enhanced, c.text)
		}
		if len(got.Text) > verdict.MaxReplyText || !utf8.ValidString(got.Text) {
			t.Errorf("%s: text of %d bytes (valid UTF-8: %v)", c.name, len(got.Text), utf8.ValidString(got.Text))
		}
	}
	if got := replyOf(smtp.Reply{}); got != nil {
		t.Errorf("no reply: %+v, want nil", got)
	}
}

// Every result carries the reply its verdict was decided on, from a real mail server, through
// Verify and VerifyBatch alike; and none where no server was asked.
func TestResultsCarryTheirReply(t *testing.T) {
	t.Parallel()
	b, cases := stepWorld(t)
	want := map[string]struct {
		code     int
		enhanced string
	}{
		"implicit MX":               {250, "2.0.0"},
		"deliverable":               {250, "2.0.0"},
		"deliverable role":          {250, "2.0.0"},
		"deliverable free provider": {250, "2.0.0"},
		"undeliverable":             {550, "5.1.1"},
		"mailbox full":              {552, "5.2.2"},
		"greylisted":                {450, "4.7.1"},
		"policy block":              {554, "5.7.1"},
		"other 4xx":                 {451, "4.3.0"},
		"sender rejected":           {554, "5.7.1"}, // our MAIL FROM's refusal
		"catch-all":                 {250, "2.0.0"},
	}
	raws := make([]string, len(cases))
	for i, c := range cases {
		raws[i] = c.addr
	}
	batch := newVerifier(t, b.w, 4)
	t.Cleanup(batch.Close)
	got := batch.VerifyBatch(context.Background(), raws, nil)
	for i, c := range cases {
		one := b.v.Verify(context.Background(), c.addr)
		for _, r := range []verdict.Result{one, got[i]} {
			w, probed := want[c.name]
			switch {
			case !probed && r.SMTPReply != nil:
				t.Errorf("%s: smtp_reply %+v, want null: no server was asked", c.name, *r.SMTPReply)
			case probed && r.SMTPReply == nil:
				t.Errorf("%s: smtp_reply null, want %d %s", c.name, w.code, w.enhanced)
			case probed && (r.SMTPReply.Code != w.code || r.SMTPReply.EnhancedCode == nil || *r.SMTPReply.EnhancedCode != w.enhanced || r.SMTPReply.Text == ""):
				t.Errorf("%s: smtp_reply %s, want %d %s with its text", c.name, jsonOf(r), w.code, w.enhanced)
			}
		}
	}
}

// An address with a UTF-8 local part is probed with SMTPUTF8 where the server offers it, and is
// unknown, smtputf8_unsupported, without a reply where it does not.
func TestUTF8LocalPart(t *testing.T) {
	t.Parallel()
	b := setup(t, 0, 4)
	b.server(t, mailsim.ServerOptions{Name: "mx.modern.test"})
	b.server(t, mailsim.ServerOptions{Name: "mx.old.test", NoSMTPUTF8: true})
	b.w.AddDomain("xn--fsqu00a.xn--4rr70v", mailsim.Domain{MX: mxOf("mx.modern.test"), Users: []string{"用户"}})
	b.w.AddDomain("xn--c2bd1gb.xn--h2brj9c", mailsim.Domain{MX: mxOf("mx.old.test"), Users: []string{"अजय"}})
	ctx := context.Background()

	r := b.v.Verify(ctx, "用户@例子.广告")
	if r.Email != "用户@xn--fsqu00a.xn--4rr70v" || r.Status != verdict.StatusDeliverable || r.Reason != verdict.ReasonAccepted || r.SMTPReply == nil || r.SMTPReply.Code != 250 {
		t.Errorf("用户@例子.广告: %s, want deliverable with the server's 250", jsonOf(r))
	}
	r = b.v.Verify(ctx, "अजय@डाटा.भारत")
	if r.Status != verdict.StatusUnknown || r.Reason != verdict.ReasonSMTPUTF8Unsupported || r.SMTPReply != nil || r.FailedCheck != nil {
		t.Errorf("अजय@डाटा.भारत: %s, want unknown, smtputf8_unsupported, no reply", jsonOf(r))
	}
}
