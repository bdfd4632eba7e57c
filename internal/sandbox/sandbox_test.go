package sandbox

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/syntax"
)

// parse is the engine's syntax layer, as the verifier workers pass it.
func parse(raw string) (string, bool) {
	a, err := syntax.Parse(raw)
	return a.String(), err == nil
}

// docRow is one row of docs/sandbox.md's magic address table.
type docRow struct {
	address, status, reason, failedCheck string
	valid                                bool
	confidence                           float64
}

var rowRE = regexp.MustCompile("^\\| `([^`]+@sandbox\\.mailvet\\.test)` \\| `([a-z_]+)` \\| `([a-z_0-9]+)` \\| (true|false) \\| ([0-9.]+) \\| (?:`([a-z_]+)`|—) \\|")

// docTable reads the magic address table of docs/sandbox.md.
func docTable(t *testing.T) []docRow {
	t.Helper()
	raw, err := os.ReadFile("../../docs/sandbox.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []docRow
	for _, line := range strings.Split(string(raw), "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		c, err := strconv.ParseFloat(m[5], 64)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, docRow{address: m[1], status: m[2], reason: m[3], valid: m[4] == "true", confidence: c, failedCheck: m[6]})
	}
	return rows
}

// TestTableDocumented: docs/sandbox.md lists every magic address, in the table's order, with
// the status, reason, valid, confidence and failed_check Verify gives it.
func TestTableDocumented(t *testing.T) {
	t.Parallel()
	rows := docTable(t)
	if len(rows) != len(Table) {
		t.Fatalf("docs/sandbox.md has %d magic addresses, the table %d", len(rows), len(Table))
	}
	for i, d := range rows {
		if Table[i].Address() != d.address {
			t.Errorf("row %d: docs %s, table %s", i, d.address, Table[i].Address())
			continue
		}
		r := Verify(d.address, parse)
		fc := ""
		if r.FailedCheck != nil {
			fc = string(*r.FailedCheck)
		}
		if string(r.Status) != d.status || string(r.Reason) != d.reason || r.Valid != d.valid || r.Confidence != d.confidence || fc != d.failedCheck || !r.Sandbox {
			t.Errorf("%s: %+v; docs say %+v", d.address, r, d)
		}
	}
}

// TestEveryReasonHasAMagicAddress: every reason the engine gives an address has its magic
// address; internal is a failed job's only, and sandbox_unlisted the sandbox's own rule.
func TestEveryReasonHasAMagicAddress(t *testing.T) {
	t.Parallel()
	have := map[verdict.Reason]bool{}
	statuses := map[verdict.Status]bool{}
	for _, m := range Table {
		have[m.Reason] = true
		statuses[Verify(m.Address(), parse).Status] = true
	}
	for _, r := range verdict.Reasons {
		if r == verdict.ReasonInternal || r == verdict.ReasonSandboxUnlisted {
			continue
		}
		if !have[r] {
			t.Errorf("reason %s has no magic address", r)
		}
	}
	for _, s := range []verdict.Status{verdict.StatusDeliverable, verdict.StatusUndeliverable, verdict.StatusUnknown, verdict.StatusCatchAll, verdict.StatusInvalid} {
		if !statuses[s] {
			t.Errorf("status %s has no magic address", s)
		}
	}
}

// TestOtherAddresses: the documented rule for addresses outside the table, and the matching of
// case and +tags.
func TestOtherAddresses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, email string
		status    verdict.Status
		reason    verdict.Reason
	}{
		{"Accepted+signup-42@Sandbox.Mailvet.Test", "accepted+signup-42@sandbox.mailvet.test", verdict.StatusDeliverable, verdict.ReasonAccepted},
		{" catch_all+x@sandbox.mailvet.test ", "catch_all+x@sandbox.mailvet.test", verdict.StatusCatchAll, verdict.ReasonCatchAll},
		{"ann@example.com", "ann@example.com", verdict.StatusUnknown, verdict.ReasonSandboxUnlisted},
		{"Ann@EXAMPLE.com", "Ann@example.com", verdict.StatusUnknown, verdict.ReasonSandboxUnlisted},
		{"anyone@sandbox.mailvet.test", "anyone@sandbox.mailvet.test", verdict.StatusUnknown, verdict.ReasonSandboxUnlisted},
		{"accepted@sub.sandbox.mailvet.test", "accepted@sub.sandbox.mailvet.test", verdict.StatusUnknown, verdict.ReasonSandboxUnlisted},
		{"temp@mailinator.com", "temp@mailinator.com", verdict.StatusUnknown, verdict.ReasonSandboxUnlisted},
		{"not-an-address", "not-an-address", verdict.StatusInvalid, verdict.ReasonInvalidSyntax},
		{"a@b", "a@b", verdict.StatusInvalid, verdict.ReasonInvalidSyntax},
	} {
		r := Verify(c.in, parse)
		if r.Email != c.email || r.Status != c.status || r.Reason != c.reason || !r.Sandbox {
			t.Errorf("%q: %+v, want %s %s %s", c.in, r, c.email, c.status, c.reason)
		}
		if _, magic := Lookup(c.in); !magic && (r.MXFound || r.SMTPReply != nil || (r.FailedCheck != nil) != (c.status == verdict.StatusInvalid)) {
			// Nothing but the syntax was looked at: no mail server, no evidence.
			t.Errorf("%q: %+v claims more than its syntax", c.in, r)
		}
	}
}
