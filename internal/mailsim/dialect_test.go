package mailsim

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDialectsOnTheWire checks that a dialect's replies reach the client as the real server
// writes them: Google's multi-line reply with the enhanced code on every line, qmail's 511 with
// the enhanced code in the text, a bare 550 without one.
func TestDialectsOnTheWire(t *testing.T) {
	t.Parallel()
	w, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, err := w.AddServer(ServerOptions{Name: "mx.dialects.test"})
	if err != nil {
		t.Fatal(err)
	}
	w.AddDomain("google.test", Domain{MX: []MX{{10, "mx.dialects.test"}}, Dialect: &Google})
	w.AddDomain("qmail.test", Domain{MX: []MX{{10, "mx.dialects.test"}}, Dialect: &Qmail})
	w.AddDomain("gateway.test", Domain{MX: []MX{{10, "mx.dialects.test"}}, Users: []string{"ann"}, All: &Gateway.Refusal})
	w.AddDomain("plain.test", Domain{MX: []MX{{10, "mx.dialects.test"}}, Users: []string{"ann"}, Mailboxes: map[string]Reply{"old": Yahoo.Disabled}})
	for _, tc := range []struct {
		rcpt string
		want []string
	}{
		{"bob@google.test", []string{
			"550-5.1.1 The email account that you tried to reach does not exist. Please try",
			"550-5.1.1 double-checking the recipient's email address for typos or",
			"550-5.1.1 unnecessary spaces. Learn more at",
			"550 5.1.1 http://support.google.com/mail/bin/answer.py?answer=6596 vw5si4655694pab.333 - gsmtp",
		}},
		{"bob@qmail.test", []string{"511 sorry, no mailbox here by that name. (#5.1.1)"}},
		{"ann@gateway.test", []string{"550 administrative prohibition envelope blocked"}},
		{"old@plain.test", []string{"554 delivery error: dd ****@yahoo.com is no longer valid."}},
		{"bob@plain.test", []string{"550 5.1.1 No such user here"}},
	} {
		if got := rcptLines(t, s.Addr().String(), w.SMTPPort(), tc.rcpt); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("RCPT %s:\n got %q\nwant %q", tc.rcpt, got, tc.want)
		}
	}
}

// rcptLines runs a session up to one RCPT and returns the lines of its reply.
func rcptLines(t *testing.T, host string, port int, addr string) []string {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	reply := func() []string {
		var lines []string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			l = strings.TrimRight(l, "\r\n")
			lines = append(lines, l)
			if len(l) < 4 || l[3] == ' ' {
				return lines
			}
		}
	}
	reply() // banner
	for _, cmd := range []string{"EHLO client.test", "MAIL FROM:<probe@client.test>"} {
		fmt.Fprintf(c, "%s\r\n", cmd)
		reply()
	}
	fmt.Fprintf(c, "RCPT TO:<%s>\r\n", addr)
	return reply()
}

// TestDialectsAreReal keeps every dialect's replies in the classifier's corpus of real replies
// (internal/verify/smtp/testdata/replies.tsv), which says where each was found.
func TestDialectsAreReal(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../verify/smtp/testdata/replies.tsv")
	if err != nil {
		t.Fatal(err)
	}
	corpus := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		if cols := strings.Split(l, "\t"); len(cols) == 6 && !strings.HasPrefix(l, "#") {
			text := strings.ReplaceAll(cols[2], `\n`, "\n")
			corpus[cols[0]+" "+cols[1]+" "+text] = true
			if cols[1] != "" {
				// A server that repeats the enhanced code on every line writes it as text.
				corpus[cols[0]+"  "+text] = true
			}
		}
	}
	for _, d := range Dialects {
		for _, r := range []Reply{d.UnknownUser, d.Disabled, d.Full, d.Refusal, d.Busy} {
			if r.Code != 0 && !corpus[strconv.Itoa(r.Code)+" "+r.Enhanced+" "+r.Text] {
				t.Errorf("%s: %s is not in the corpus", d.Name, r)
			}
		}
	}
}
