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
