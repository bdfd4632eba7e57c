package smtp

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestCorpus reads every row of testdata/replies.tsv, real replies of real servers with the
// verdict and reason they mean, and checks that the classifier reads each one so.
func TestCorpus(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/replies.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	rows, header := 0, false
	seen := map[string]int{}
	for line := 0; sc.Scan(); {
		line++
		l := sc.Text()
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		if !header {
			header = true // the column names
			continue
		}
		cols := strings.Split(l, "\t")
		if len(cols) != 6 {
			t.Fatalf("line %d: %d columns, want 6", line, len(cols))
		}
		code, err := strconv.Atoi(cols[0])
		if err != nil || code < 200 || code > 599 {
			t.Fatalf("line %d: code %q", line, cols[0])
		}
		if cols[5] == "" {
			t.Fatalf("line %d: no source", line)
		}
		key := cols[0] + " " + cols[1] + " " + cols[2]
		if prev, dup := seen[key]; dup {
			t.Errorf("line %d repeats line %d", line, prev)
		}
		seen[key] = line
		rep := Reply{Code: code, Enhanced: cols[1], Text: strings.ReplaceAll(cols[2], `\n`, "\n")}
		got := Classify(rep)
		if got.Verdict.String() != cols[3] || string(got.Meaning) != cols[4] {
			t.Errorf("line %d: %s: %s/%s, want %s/%s", line, rep, got.Verdict, got.Meaning, cols[3], cols[4])
		}
		rows++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows < 150 {
		t.Errorf("%d rows, want at least 150", rows)
	}
}

// TestClassifyPrecedence pins the precedence rules of docs/architecture.md, "Reading replies",
// each with the smallest reply that shows it.
func TestClassifyPrecedence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    Reply
		want Class
	}{
		{"250", Reply{Code: 250}, Class{Deliverable, MeaningAccepted}},
		{"251", Reply{Code: 251}, Class{Deliverable, MeaningAccepted}},
		{"252 is no acceptance", Reply{Code: 252}, Class{Unknown, MeaningTemporary}},
		{"no-such-user words beat a policy code", Reply{Code: 550, Enhanced: "5.7.1", Text: "No such user!"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"no-such-user words beat 554", Reply{Code: 554, Text: "no such user here"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"disabled words beat a policy code", Reply{Code: 550, Enhanced: "5.7.1", Text: "This mailbox is disabled"}, Class{Undeliverable, MeaningMailboxDisabled}},
		{"our IP beats a bare 550", Reply{Code: 550, Text: "Your IP is listed at zen.spamhaus.org"}, Class{Unknown, MeaningPolicyBlocked}},
		{"an administrative prohibition beats a bare 550", Reply{Code: 550, Text: "Administrative prohibition"}, Class{Unknown, MeaningPolicyBlocked}},
		{"envelope blocked beats a bare 550", Reply{Code: 550, Text: "Envelope blocked"}, Class{Unknown, MeaningPolicyBlocked}},
		{"our IP beats 5.1.1", Reply{Code: 550, Enhanced: "5.1.1", Text: "Client host [192.0.2.1] blocked using zen.spamhaus.org"}, Class{Unknown, MeaningPolicyBlocked}},
		{"5.1.1 without words is no such mailbox", Reply{Code: 550, Enhanced: "5.1.1"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"5.1.10 without words is no such mailbox", Reply{Code: 550, Enhanced: "5.1.10"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"5.1.1 under 554", Reply{Code: 554, Enhanced: "5.1.1"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"a bare 550 is cautious", Reply{Code: 550}, Class{Unknown, MeaningPolicyBlocked}},
		{"a bare 551 is cautious", Reply{Code: 551}, Class{Unknown, MeaningPolicyBlocked}},
		{"a bare 553 is cautious", Reply{Code: 553}, Class{Unknown, MeaningPolicyBlocked}},
		{"unknown wording is cautious", Reply{Code: 550, Text: "Rejected"}, Class{Unknown, MeaningPolicyBlocked}},
		{"5.7.1 without words", Reply{Code: 550, Enhanced: "5.7.1"}, Class{Unknown, MeaningPolicyBlocked}},
		{"511 read by its first digit and text", Reply{Code: 511, Text: "sorry, no mailbox here by that name. (#5.1.1)"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"511 without words", Reply{Code: 511}, Class{Unknown, MeaningPolicyBlocked}},
		{"qmail's #5.1.1 in the text", Reply{Code: 550, Text: "sorry (#5.1.1)"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"a 4xx never says undeliverable", Reply{Code: 450, Enhanced: "4.1.1", Text: "User unknown"}, Class{Unknown, MeaningTemporary}},
		{"421", Reply{Code: 421}, Class{Unknown, MeaningTemporary}},
		{"450 4.7.x greylisting", Reply{Code: 450, Enhanced: "4.7.1", Text: "Please come back"}, Class{Unknown, MeaningGreylisted}},
		{"451 greylisting words", Reply{Code: 451, Text: "Greylisting in action"}, Class{Unknown, MeaningGreylisted}},
		{"452 4.2.2", Reply{Code: 452, Enhanced: "4.2.2"}, Class{Unknown, MeaningMailboxFull}},
		{"552 5.2.2", Reply{Code: 552, Enhanced: "5.2.2"}, Class{Unknown, MeaningMailboxFull}},
		{"552 quota words", Reply{Code: 552, Text: "Quota exceeded"}, Class{Unknown, MeaningMailboxFull}},
		{"sender refused at RCPT (553 5.1.8)", Reply{Code: 553, Enhanced: "5.1.8", Text: "<ann@x.test>: Sender address rejected: Domain not found"}, Class{Unknown, MeaningSenderRejected}},
		{"sender refused at RCPT (550 5.1.7)", Reply{Code: 550, Enhanced: "5.1.7", Text: "Bad sender's mailbox address syntax"}, Class{Unknown, MeaningSenderRejected}},
		{"sender refused at RCPT without enhanced code", Reply{Code: 553, Text: "<ann@x.test>: Sender address rejected: not owned by user"}, Class{Unknown, MeaningSenderRejected}},
		{"sender words under another enhanced code (Postfix reject_unlisted_sender, 5.1.0)", Reply{Code: 550, Enhanced: "5.1.0", Text: "<ann@x.test>: Sender address rejected: User unknown in local recipient table"}, Class{Unknown, MeaningSenderRejected}},
		{"DNS records in a refusal are ours: the prober reached the MX through the domain's", Reply{Code: 550, Text: "mailbox unavailable: invalid DNS MX record"}, Class{Unknown, MeaningPolicyBlocked}},
		{"sender deferred at RCPT (450 4.1.8)", Reply{Code: 450, Enhanced: "4.1.8", Text: "<ann@x.test>: Sender address rejected: Domain not found"}, Class{Unknown, MeaningTemporary}},
		{"a relay table is no relay refusal", Reply{Code: 550, Enhanced: "5.1.1", Text: "<ann@x.test>: Recipient address rejected: User unknown in relay recipient table"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"'recipient' holds no 'ip address'", Reply{Code: 550, Text: "User unknown: recip address"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"'not found' about our PTR record is about us", Reply{Code: 550, Text: "PTR not found"}, Class{Unknown, MeaningPolicyBlocked}},
		{"'does not exist' about our domain is about us", Reply{Code: 550, Enhanced: "5.7.1", Text: "Your sending domain does not exist"}, Class{Unknown, MeaningPolicyBlocked}},
		{"'disabled' about our account is about us", Reply{Code: 550, Text: "Sending from your account is disabled"}, Class{Unknown, MeaningPolicyBlocked}},
		{"temporary words keep a disabled mailbox unknown", Reply{Code: 550, Text: "Mailbox temporarily disabled"}, Class{Unknown, MeaningTemporary}},
		{"full words beat 'mailbox unavailable'", Reply{Code: 550, Text: "mailbox unavailable (not enough free space)"}, Class{Unknown, MeaningMailboxFull}},
		{"'administratively disabled' is the mailbox's", Reply{Code: 550, Text: "Mailaddress is administratively disabled"}, Class{Undeliverable, MeaningMailboxDisabled}},
		{"'administratively denied' is about us", Reply{Code: 550, Text: "mail from your location is administratively denied"}, Class{Unknown, MeaningPolicyBlocked}},
		{"a Japanese phrase needs no space after it", Reply{Code: 550, Text: "ユーザーはディレクトリには見つかりません。"}, Class{Undeliverable, MeaningMailboxUnknown}},
		{"a Latin phrase is still whole words", Reply{Code: 550, Text: "no existence"}, Class{Unknown, MeaningPolicyBlocked}},
	} {
		if got := Classify(tc.r); got != tc.want {
			t.Errorf("%s: Classify(%s) = %v/%s, want %v/%s", tc.name, tc.r, got.Verdict, got.Meaning, tc.want.Verdict, tc.want.Meaning)
		}
	}
}

// BenchmarkClassify measures the reading of one refusal, the classifier's longest path (every
// phrase family is looked for).
func BenchmarkClassify(b *testing.B) {
	r := Reply{Code: 550, Enhanced: "5.1.1", Text: "<ann@example.test>: Recipient address rejected: User unknown in virtual mailbox table"}
	for b.Loop() {
		Classify(r)
	}
}
