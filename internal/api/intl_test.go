package api

import (
	"net/http"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/plan"
)

// Layer 1's stricter rules and international mailboxes, through the API and a verifier worker:
// a line break anywhere is invalid syntax and the address is returned with it, spaces and tabs
// around an address are trimmed, IDNA's reserved "--" is invalid, and a UTF-8 local part is
// verified on a mail server that offers SMTPUTF8, with the server's reply as smtp_reply, which
// the usage log's snapshot keeps too.
func TestVerifyStrictSyntaxAndUTF8Mailboxes(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	b.mail.AddDomain("xn--fsqu00a.xn--4rr70v", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.acme.test"}}, Users: []string{"用户"}})
	acct, key := b.customer(plan.Builder)

	cases := []struct {
		in, email, status, reason string
		code                      float64 // smtp_reply.code; 0 for null
	}{
		{"ann@acme.test\r\n", "ann@acme.test\r\n", "invalid", "invalid_syntax", 0},
		{"ann@acme.test\n", "ann@acme.test\n", "invalid", "invalid_syntax", 0},
		{"ann@ab--cd.test", "ann@ab--cd.test", "invalid", "invalid_syntax", 0},
		{" \tann@acme.test\t ", "ann@acme.test", "deliverable", "accepted", 250},
		{"用户@例子.广告", "用户@xn--fsqu00a.xn--4rr70v", "deliverable", "accepted", 250},
		{"无人@例子.广告", "无人@xn--fsqu00a.xn--4rr70v", "undeliverable", "mailbox_unknown", 550},
	}
	for _, c := range cases {
		r := b.verify(key, map[string]string{"email": c.in}).want(t, http.StatusOK, "").body
		reply, _ := r["smtp_reply"].(map[string]any)
		code, _ := reply["code"].(float64)
		if r["email"] != c.email || r["status"] != c.status || r["reason"] != c.reason || code != c.code {
			t.Errorf("%q: %v, want %s, %s, %s with smtp_reply code %v", c.in, r, c.email, c.status, c.reason, c.code)
		}
	}
	b.srv.Close() // the verdicts are written behind the responses
	if n := b.count(`SELECT count(*) FROM usage_log WHERE account_id = $1 AND snapshot->>'email' = $2
		AND (snapshot->'smtp_reply'->>'code')::int = 250`, acct, "用户@xn--fsqu00a.xn--4rr70v"); n != 1 {
		t.Errorf("%d usage rows with the UTF-8 mailbox's snapshot and its reply, want 1", n)
	}
}
